// Package jsinbox is the one reply subscription a connection's hand-made
// JetStream requests share: the acks of the log's appends ([Inbox.Publish],
// [Ack.Wait]) and the replies of batch direct gets ([GetBatch]). One
// subscription on a wildcard inbox, one token per request, so no request
// costs a subscription of its own (whose default buffer is 512 KiB).
//
// It is Arbiter's machinery, not its API: events builds its fenced append
// and its reads on it, and the packages that read a stream raw (approvals,
// client, console, fleet, replay, traces) read with [GetBatch]. It knows
// nothing of events: messages in, stored messages and acks out.
package jsinbox
