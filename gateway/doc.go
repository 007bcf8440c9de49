// Package gateway is an MCP server that puts the gate (package gate) in
// front of the tools of upstream MCP servers (package mcp): a host (Claude
// Desktop, an IDE, any MCP client) sees the pinned, classified tools and
// nothing else, and every call it makes is asked of the gate, recorded,
// decided, and run upstream only when allowed.
//
// One host session is one run. A call that needs an operator waits up to
// [Config.Wait] for the decision, then answers with a result, not an
// error, that names the approval; the host's identical call after the grant
// consumes it and runs once. A read-only status tool tells the model which
// of its calls wait.
//
// The package decides nothing itself (the driver and its policy do); it
// runs upstream only the calls the gate allows, with the arguments the gate
// recorded.
package gateway
