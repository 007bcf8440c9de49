package rules

import (
	"encoding/json"
	"testing"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// viaGo is what the arguments were before jsonCEL: encoding/json into an
// any, then celValue.
func viaGo(data []byte) (ref.Val, bool) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, false
	}
	return celValue(v), true
}

// sameCEL reports whether a and b are the same CEL value: the same type
// at every level, and equal.
func sameCEL(a, b ref.Val) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch x := a.(type) {
	case traits.Mapper:
		y := b.(traits.Mapper)
		if x.Size() != y.Size() {
			return false
		}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			bv, ok := y.Find(k)
			if !ok || !sameCEL(x.Get(k), bv) {
				return false
			}
		}
		return true
	case traits.Lister:
		y := b.(traits.Lister)
		if x.Size() != y.Size() {
			return false
		}
		n := int64(x.Size().(types.Int))
		for i := int64(0); i < n; i++ {
			if !sameCEL(x.Get(types.Int(i)), y.Get(types.Int(i))) {
				return false
			}
		}
		return true
	}
	return a.Equal(b) == types.True
}

var argsSeeds = []string{
	`{"n":7,"path":"notes.txt"}`, `{}`, `[]`, `null`, `true`, `-0`, `1e308`, `1e309`, `-1e400`, `0.1e-400`,
	`{"a":{"b":[1,2.5,{"c":null}],"d":false},"e":"x\"y\\u00e9\ud83d\ude00"}`, `{"a":1,"a":2}`,
	" {\"k\" : [ ] ,\n\"j\":\t{ } } ", `"\xff\xfe"`, `{"\xc3\xa9":"\xed\xa0\x80"}`, `{"a":"\u0000"}`,
	`{"a":`, `{"a":1}x`, `nul`, `01`, `{"a":[1,]}`, ``, `"\ud800"`,
}

// TestArgsCEL_SameAsThroughGo: the arguments decoded straight into CEL
// values are what decoding into Go values and converting gave, and a
// document encoding/json refuses is refused.
func TestArgsCEL_SameAsThroughGo(t *testing.T) {
	for _, s := range argsSeeds {
		checkArgsCEL(t, []byte(s))
	}
}

// FuzzArgsCEL is TestArgsCEL_SameAsThroughGo over any bytes.
func FuzzArgsCEL(f *testing.F) {
	for _, s := range argsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkArgsCEL(t, data) })
}

func checkArgsCEL(t *testing.T, data []byte) {
	t.Helper()
	want, wok := viaGo(data)
	got, gok := jsonCEL(data)
	if wok != gok {
		t.Fatalf("%q: decoded %v straight, %v through Go", data, gok, wok)
	}
	if wok && !sameCEL(got, want) {
		t.Fatalf("%q: straight %v (%s), through Go %v (%s)", data, got, got.Type(), want, want.Type())
	}
}
