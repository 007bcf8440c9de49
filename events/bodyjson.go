package events

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// The bodies a driver writes on every step are encoded by hand: the same
// bytes encoding/json writes for them (without HTML escaping), at a
// fraction of the cost. TestBodyJSON_SameAsEncodingJSON holds them equal.
// A body with a field these do not handle (approval requests, argument
// bytes) goes through encoding/json.

// appendBody appends body's JSON to dst, and false when body is not one the
// hand encoders take.
func appendBody(dst []byte, body any) ([]byte, bool) {
	switch b := body.(type) {
	case StepDecidedBody:
		if b.ArgsBytes != nil || b.Oversize != nil {
			return dst, false
		}
		dst = append(dst, `{"step":`...)
		dst = strconv.AppendInt(dst, int64(b.Step), 10)
		dst = append(dst, `,"tool":`...)
		dst = appendString(dst, b.Tool)
		dst = appendOmit(dst, `,"args":`, b.Args)
		dst = appendOmit(dst, `,"call_id":`, b.CallID)
		dst = appendOmit(dst, `,"reason":`, b.Reason)
		if b.Policy != nil {
			var ok bool
			if dst, ok = appendBody(append(dst, `,"policy":`...), *b.Policy); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	case PolicyBody:
		if b.Approval != nil || b.Shadow != nil {
			return dst, false
		}
		dst = append(dst, `{"step":`...)
		dst = strconv.AppendInt(dst, int64(b.Step), 10)
		dst = append(dst, `,"outcome":`...)
		dst = appendString(dst, string(b.Outcome))
		dst = appendOmit(dst, `,"reason":`, b.Reason)
		dst = appendOmit(dst, `,"policy_id":`, b.PolicyID)
		if len(b.Args) > 0 {
			// encoding/json compacts a RawMessage, and refuses one that is
			// not JSON: so does this.
			buf := bytes.NewBuffer(append(dst, `,"args":`...))
			if err := json.Compact(buf, b.Args); err != nil {
				return dst, false
			}
			dst = buf.Bytes()
		}
		dst = appendOmit(dst, `,"tool_hash":`, b.ToolHash)
		dst = appendOmit(dst, `,"consumes":`, b.Consumes)
		dst = appendOmit(dst, `,"origin":`, b.Origin)
		if b.Resume {
			dst = append(dst, `,"resume":true`...)
		}
		if len(b.Parts) > 0 {
			dst = appendParts(append(dst, `,"parts":`...), b.Parts)
		}
		return append(dst, '}'), true
	case ObservedBody:
		dst = append(dst, `{"step":`...)
		dst = strconv.AppendInt(dst, int64(b.Step), 10)
		dst = append(dst, `,"kind":`...)
		dst = appendString(dst, string(b.Kind))
		dst = append(dst, `,"content":`...)
		dst = appendString(dst, b.Content)
		if b.Truncated {
			dst = append(dst, `,"truncated":true`...)
		}
		return append(dst, '}'), true
	}
	return dst, false
}

// appendParts appends parts as encoding/json writes a []PolicyPart.
func appendParts(dst []byte, parts []PolicyPart) []byte {
	dst = append(dst, '[')
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = appendString(dst, p.ID)
		dst = append(dst, `,"outcome":`...)
		dst = appendString(dst, string(p.Outcome))
		dst = appendOmit(dst, `,"reason":`, p.Reason)
		dst = appendOmit(dst, `,"code":`, p.Code)
		dst = appendOmit(dst, `,"mode":`, p.Mode)
		dst = appendOmit(dst, `,"window":`, p.Window)
		if p.Count != 0 {
			dst = strconv.AppendInt(append(dst, `,"count":`...), p.Count, 10)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendOmit appends key and s as a JSON string unless s is empty
// (omitempty).
func appendOmit(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	return appendString(append(dst, key...), s)
}
