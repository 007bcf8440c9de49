package jsonform

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestPolicyJSON_Canonical(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"keys sorted", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
		{"keys sorted bytewise not by length", `{"ab":1,"b":2,"a":3,"":4}`, `{"":4,"a":3,"ab":1,"b":2}`},
		{"uppercase before lowercase", `{"a":1,"B":2,"_":3}`, `{"B":2,"_":3,"a":1}`},
		{"utf16 order puts astral before U+E000",
			`{"\ue000":1,"\ud83d\ude00":2}`, "{\"\U0001F600\":2,\"\ue000\":1}"},
		{"rfc8785 key sorting example",
			`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
			"{\"\\r\":2,\"1\":4,\"\u0080\":6,\"\u00f6\":7,\"\u20ac\":1,\"\U0001F600\":5,\"\ufb33\":3}"},
		{"astral keys among themselves", `{"😀":1,"😁":2,"𐀀":3}`, `{"𐀀":3,"😀":1,"😁":2}`},
		{"sorted by unescaped key", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"escaped keys re-escaped", `{"a\"b":1,"a\nb":2,"a\u0001":3}`, `{"a\u0001":3,"a\nb":2,"a\"b":1}`},
		{"whitespace removed", " \t{ \"a\" :\n[ 1 ,\r\n2 ] , \"b\" : { } }\n ", `{"a":[1,2],"b":{}}`},
		{"simple escapes kept", `"\"\\\b\f\n\r\t"`, `"\"\\\b\f\n\r\t"`},
		{"control escapes lowercase", `"\u0000\u0001\u001F\u001b\u000B"`, `"\u0000\u0001\u001f\u001b\u000b"`},
		{"control escapes shortened", `"\u0008\u000c\u000A\u000d\u0009\u0022\u005c"`, `"\b\f\n\r\t\"\\"`},
		{"solidus unescaped", `"a\/b"`, `"a/b"`},
		{"letters unescaped", `"\u0061\u0062"`, `"ab"`},
		{"DEL literal", `"\u007f"`, "\"\x7f\""},
		{"html literal", `"\u003c\u003e\u0026 <>&"`, `"<>& <>&"`},
		{"line separators literal", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"raw utf8 kept", `"é😀€"`, `"é😀€"`},
		{"escaped non-ascii unescaped", `"\u00e9\ud83d\ude00\u20AC"`, `"é😀€"`},
		{"replacement char kept", `"\ufffd"`, "\"\ufffd\""},
		{"numbers as written",
			`[1.0,1e2,1E2,-0,0.5E+3,1e-2,1.50,123456789012345678901234567890,-0.0e00]`,
			`[1.0,1e2,1E2,-0,0.5E+3,1e-2,1.50,123456789012345678901234567890,-0.0e00]`},
		{"nested", `{"z":{"y":[{"b":true,"a":false}],"x":{}},"a":[]}`,
			`{"a":[],"z":{"x":{},"y":[{"a":false,"b":true}]}}`},
		{"nested arrays", `[ [ ], [ [ ] ], [1, [2, [3]]] ]`, `[[],[[]],[1,[2,[3]]]]`},
		{"empty object", ` { } `, `{}`},
		{"empty array", ` [ ] `, `[]`},
		{"scalar roots", ` null `, `null`},
		{"string root", ` "x" `, `"x"`},
		{"many keys", manyKeys(3, `"a":0`), `{"a":0,"k00":0,"k01":0,"k02":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicyJSON([]byte(tt.in))
			if err != nil {
				t.Fatalf("PolicyJSON(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("PolicyJSON(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			again, err := PolicyJSON(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("not idempotent: %q -> %q, %v", got, again, err)
			}
		})
	}
}

func TestPolicyJSON_SortsLargeObjects(t *testing.T) {
	var in, want strings.Builder
	in.WriteString("{")
	want.WriteString("{")
	for i := 99; i >= 0; i-- {
		if i != 99 {
			in.WriteString(" , ")
		}
		in.WriteString(`"` + string(rune('a'+i/10)) + string(rune('a'+i%10)) + `" : [ ` + "1" + ` ]`)
	}
	for i := range 100 {
		if i != 0 {
			want.WriteString(",")
		}
		want.WriteString(`"` + string(rune('a'+i/10)) + string(rune('a'+i%10)) + `":[1]`)
	}
	in.WriteString("}")
	want.WriteString("}")
	got, err := PolicyJSON([]byte(in.String()))
	if err != nil || string(got) != want.String() {
		t.Errorf("PolicyJSON = %s, %v\nwant %s", got, err, want.String())
	}
}

func TestPolicyJSON_SameForEquivalentInputs(t *testing.T) {
	groups := [][]string{
		{
			`{"a":1,"b":[true,null]}`,
			`{"b":[true,null],"a":1}`,
			" {\n  \"b\" : [ true , null ],\n  \"a\" : 1\n} ",
			`{"\u0062":[true,null],"\u0061":1}`,
		},
		{
			`{"tool":"fs.write","args":{"path":"/tmp/a b","mode":420}}`,
			`{"args":{"mode":420,"path":"\/tmp\/a\u0020b"},"tool":"fs.write"}`,
			`{ "args" : { "path" : "/tmp/a b" , "mode" : 420 } , "tool" : "fs\u002ewrite" }`,
		},
		{
			`"😀 é <&> \n"`,
			`"\ud83d\ude00 \u00e9 \u003c\u0026\u003e \u000a"`,
			`"\uD83D\uDE00 \u00E9 <&> \n"`,
		},
		{
			`{"\ue000":1,"😀":2,"a":{"y":[],"x":{}}}`,
			`{"a":{"x":{},"y":[]},"\ud83d\ude00":2,"\uE000":1}`,
		},
	}
	for gi, group := range groups {
		first, err := PolicyJSON([]byte(group[0]))
		if err != nil {
			t.Fatalf("group %d: PolicyJSON(%q): %v", gi, group[0], err)
		}
		for _, in := range group[1:] {
			got, err := PolicyJSON([]byte(in))
			if err != nil || !bytes.Equal(got, first) {
				t.Errorf("group %d: PolicyJSON(%q) = %q, %v; want %q", gi, in, got, err, first)
			}
			if !Equal([]byte(group[0]), []byte(in)) {
				t.Errorf("group %d: Equal(%q, %q) = false", gi, group[0], in)
			}
		}
	}
	// Numbers are kept as written, so different spellings stay different.
	if Equal([]byte(`1.0`), []byte(`1`)) || Equal([]byte(`1e2`), []byte(`100`)) {
		t.Error("numbers with different spellings compared equal")
	}
}

func TestAppendPolicyJSON(t *testing.T) {
	dst := []byte("prefix:")
	got, err := AppendPolicyJSON(dst, []byte(` {"b":1, "a":2} `))
	if err != nil || string(got) != `prefix:{"a":2,"b":1}` {
		t.Errorf("AppendPolicyJSON = %q, %v", got, err)
	}
	got, err = AppendPolicyJSON(dst, []byte(`{"a":1,"a":2}`))
	if !errors.Is(err, ErrDuplicateKey) || string(got) != "prefix:" {
		t.Errorf("AppendPolicyJSON on error = %q, %v", got, err)
	}
	if out, err := PolicyJSON([]byte(`[1,]`)); out != nil || !errors.Is(err, ErrSyntax) {
		t.Errorf("PolicyJSON on error = %q, %v", out, err)
	}
}

func TestMarshal_NoHTMLEscape(t *testing.T) {
	v := map[string]any{
		"html": `<a href="x">&</a>`,
		"b":    1.5,
		"a":    []int{1, 2},
		"sep":  "\u2028",
		"ctl":  "\x01\n",
	}
	got, err := Marshal(v)
	want := "{\"a\":[1,2],\"b\":1.5,\"ctl\":\"\\u0001\\n\",\"html\":\"<a href=\\\"x\\\">&</a>\",\"sep\":\"\u2028\"}"
	if err != nil || string(got) != want {
		t.Errorf("Marshal = %s, %v\nwant %s", got, err, want)
	}
	type args struct {
		Zed   string `json:"zed"`
		Alpha int    `json:"alpha"`
	}
	got, err = Marshal(args{Zed: "<z>", Alpha: 1})
	if err != nil || string(got) != `{"alpha":1,"zed":"<z>"}` {
		t.Errorf("Marshal(struct) = %s, %v", got, err)
	}
	if _, err := Marshal(json.RawMessage(`{"a":1,"a":2}`)); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("Marshal(raw duplicate) error = %v, want ErrDuplicateKey", err)
	}
	if _, err := Marshal(make(chan int)); err == nil {
		t.Error("Marshal(chan) succeeded")
	}
}

func TestEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{` [1, "\u0061"] `, `[1,"a"]`, true},
		{`{"a":1}`, `{"a":2}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`1.0`, `1`, false},
		{`{"a":1,"a":1}`, `{"a":1,"a":1}`, false},
		{`{"a":1}`, `{"a":1`, false},
		{"\"\xff\"", "\"\xff\"", false},
		{``, ``, false},
	}
	for _, tt := range tests {
		if got := Equal([]byte(tt.a), []byte(tt.b)); got != tt.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := Equal([]byte(tt.b), []byte(tt.a)); got != tt.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestCompareKeys(t *testing.T) {
	ordered := []string{"", "\x00", "\r", "1", "A", "a", "aa", "b", "\u0080", "\u00f6", "\u20ac",
		"\ud7ff", "\U00010000", "\U0001F600", "\U0001F600a", "\U0001F601", "\U0010FFFF", "\ue000", "\ufb33", "\uffff"}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := compareKeys([]byte(ordered[i]), []byte(ordered[j])); got != want {
				t.Errorf("compareKeys(%q, %q) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}
