// Package notify tells people that an approval waits: a notifier follows
// every approval.requested event of the log and posts a notice of each to
// configured HTTP endpoints, a generic JSON webhook signed with
// HMAC-SHA256, or a Slack-compatible incoming webhook.
//
// Notifiers share one durable consumer per shard, so each request goes to
// one of them, and one that restarts resumes after the last it
// acknowledged: one notice per approval, whatever the number of notifiers
// and restarts, unless a notifier dies between an endpoint's answer and
// its acknowledgement (then the next one sends it again, with the same
// delivery id for the receiver to drop it).
//
// Everything a model chose (the tool's name as requested, the policy's
// reason, which may quote the arguments) is neutralised before it is
// sent: no mention, link or markup of it reaches a chat. The notice links
// to the console's page of the run. It reads the log; it writes nothing
// on it.
package notify
