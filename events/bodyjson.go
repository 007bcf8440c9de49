package events

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The bodies a driver writes on every step are encoded by hand: the same
// bytes encoding/json writes for them (without HTML escaping), at a
// fraction of the cost. TestBodyJSON_SameAsEncodingJSON holds them equal.
// A body with a field these do not handle (approval requests, argument
// bytes) goes through encoding/json.

// bodySize returns how many bytes appendBody writes for body (at most: a
// policy's arguments are counted as they are, before compacting), and false
// when body is not one the hand encoders take. marshalBody sizes its buffer
// with it, so that the encoder never grows the buffer as it writes: a step
// with a composed policy's thirteen parts otherwise reallocated it four times
// on its way to 2 KB. It mirrors appendBody field for field;
// TestBodyJSON_SizedOnce fails when the two differ.
func bodySize(body any) (int, bool) {
	switch b := body.(type) {
	case StepDecidedBody:
		if b.ArgsBytes != nil || b.Oversize != nil {
			return 0, false
		}
		n := len(`{"step":`) + intLen(int64(b.Step)) + len(`,"tool":`) + quotedLen(b.Tool) +
			omitLen(`,"args":`, b.Args) + omitLen(`,"call_id":`, b.CallID) + omitLen(`,"reason":`, b.Reason) + 1
		if b.Policy != nil {
			m, ok := bodySize(*b.Policy)
			if !ok {
				return 0, false
			}
			n += len(`,"policy":`) + m
		}
		return n, true
	case PolicyBody:
		if b.Approval != nil || b.Shadow != nil {
			return 0, false
		}
		n := len(`{"step":`) + intLen(int64(b.Step)) + len(`,"outcome":`) + quotedLen(string(b.Outcome)) +
			omitLen(`,"reason":`, b.Reason) + omitLen(`,"policy_id":`, b.PolicyID) +
			omitLen(`,"tool_hash":`, b.ToolHash) + omitLen(`,"consumes":`, b.Consumes) + omitLen(`,"origin":`, b.Origin) + 1
		if len(b.Args) > 0 {
			n += len(`,"args":`) + len(b.Args)
		}
		if b.Resume {
			n += len(`,"resume":true`)
		}
		if len(b.Parts) > 0 {
			n += len(`,"parts":`) + partsSize(b.Parts)
		}
		return n, true
	case EndBody:
		n := len(`{"reason":`) + quotedLen(string(b.Reason)) + omitLen(`,"detail":`, b.Detail) + omitLen(`,"result":`, b.Result) + 1
		if b.Policy != nil {
			m, ok := bodySize(*b.Policy)
			if !ok {
				return 0, false
			}
			n += len(`,"policy":`) + m
		}
		if b.Observation != nil {
			m, _ := bodySize(*b.Observation)
			n += len(`,"observation":`) + m
		}
		return n, true
	case ObservedBody:
		n := len(`{"step":`) + intLen(int64(b.Step)) + len(`,"kind":`) + quotedLen(string(b.Kind)) +
			len(`,"content":`) + quotedLen(b.Content) + 1
		if b.Truncated {
			n += len(`,"truncated":true`)
		}
		return n, true
	}
	return 0, false
}

// partsSize is the length of appendParts' output for parts.
func partsSize(parts []PolicyPart) int {
	n := 2 + len(parts) - 1 // the brackets and the commas between
	for _, p := range parts {
		n += len(`{"id":`) + quotedLen(p.ID) + len(`,"outcome":`) + quotedLen(string(p.Outcome)) +
			omitLen(`,"reason":`, p.Reason) + omitLen(`,"code":`, p.Code) + omitLen(`,"mode":`, p.Mode) +
			omitLen(`,"window":`, p.Window) + 1
		if p.Count != 0 {
			n += len(`,"count":`) + intLen(p.Count)
		}
	}
	return n
}

// omitLen is the length of appendOmit's output for key and s.
func omitLen(key, s string) int {
	if s == "" {
		return 0
	}
	return len(key) + quotedLen(s)
}

// quotedLen is the length of appendString's output for s, quotes included:
// each escape as long as jsonform.AppendQuoted (without HTML escaping)
// writes it. TestQuotedLen_IsAppendStringsLength holds the two together.
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20:
				n += 6 // \u00XX
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6 // \ufffd, \u2028, \u2029
		default:
			n += size
		}
		i += size
	}
	return n
}

// intLen is the number of bytes strconv.AppendInt writes for v in base 10.
func intLen(v int64) int {
	n := 1
	u := uint64(v)
	if v < 0 {
		n, u = 2, -u
	}
	for ; u >= 10; u /= 10 {
		n++
	}
	return n
}

// uintLen is the number of bytes strconv.AppendUint writes for v in base 10.
func uintLen(v uint64) int {
	n := 1
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

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
		var ok bool
		if dst, ok = appendPolicy(dst, b.Policy); !ok {
			return dst, false
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
	case EndBody:
		dst = append(dst, `{"reason":`...)
		dst = appendString(dst, string(b.Reason))
		dst = appendOmit(dst, `,"detail":`, b.Detail)
		dst = appendOmit(dst, `,"result":`, b.Result)
		var ok bool
		if dst, ok = appendPolicy(dst, b.Policy); !ok {
			return dst, false
		}
		if b.Observation != nil {
			dst, _ = appendBody(append(dst, `,"observation":`...), *b.Observation)
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

// appendPolicy appends the ",policy" member of a body that carries p, if p
// is set; false when p is not hand encoded.
func appendPolicy(dst []byte, p *PolicyBody) ([]byte, bool) {
	if p == nil {
		return dst, true
	}
	return appendBody(append(dst, `,"policy":`...), *p)
}
