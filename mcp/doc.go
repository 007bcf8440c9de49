// Package mcp puts the tools of Model Context Protocol servers under the
// runtime: it connects to each configured server (a command over stdio, or
// a URL over streamable HTTP), and offers the tools the operator classified
// and pinned as driver tools named "<server>__<tool>".
//
// An operator decides each tool's side-effect class; a server's annotations
// may only make it stricter. A tool is offered only while its name,
// description, input schema and annotations hash to what the lock file
// pinned: a changed, new or renamed tool is refused and reported, never
// offered. Arguments the operator fixed are hidden from the model's schema
// and set on every call; they and the pin are part of the recorded tool
// spec, so approvals and replay bind them.
//
// It must not decide whether a call runs (the policy does) nor record
// events itself: a call's outcome reaches the log through the driver. A call
// cut off by a timeout or a dying server is returned as
// [driver.ErrInterrupted], so crash recovery resolves it.
package mcp
