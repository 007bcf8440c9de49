// Package jsonform owns Arbiter's JSON boundary: the single place where raw
// JSON bytes from agents, tools and operators are judged well-formed, and the
// single definition of "PolicyJSON", the canonical byte form that policy
// evaluation, hashing and event records are computed over.
//
// Check is deliberately stricter than encoding/json. It refuses anything that
// could make two readers disagree about a document: repeated object keys
// (compared after unescaping), invalid UTF-8 anywhere in the input, escaped
// surrogates that are not a proper high+low pair, nesting deeper than
// MaxDepth, and anything RFC 8259 does not allow. PolicyJSON then rewrites an
// accepted document into one canonical spelling: object keys sorted by UTF-16
// code units as RFC 8785 does, no insignificant whitespace, numbers exactly as
// written, and strings with only the escapes JSON requires. Documents that
// differ only in key order, whitespace or string escapes have identical
// PolicyJSON.
//
// The package is a leaf: it imports only the standard library and must not
// import any other Arbiter package, know about events, policies or tools, do
// I/O, log, or keep state between calls beyond pooled scratch buffers. It
// does not interpret numbers (no float conversion, so no precision loss) and
// does not decode documents into Go values; callers that need values decode
// the canonical bytes themselves. Its hot paths (Check, PolicyJSON,
// AppendPolicyJSON, Equal) are a single-pass byte scanner that uses no
// reflection and builds no maps for ordinary documents.
package jsonform
