package rules

import (
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// celValue converts a value of the shapes conditions see (what
// encoding/json decodes, and the maps built for tool, run and actor) into
// CEL values once, so that reading a field in a condition converts
// nothing: CEL's own adapter converts a Go map's value on every access.
func celValue(v any) ref.Val {
	switch x := v.(type) {
	case nil:
		return types.NullValue
	case bool:
		return types.Bool(x)
	case string:
		return types.String(x)
	case float64:
		return types.Double(x)
	case int64:
		return types.Int(x)
	case time.Time:
		return types.Timestamp{Time: x}
	case []string:
		return types.NewStringList(types.DefaultTypeAdapter, x)
	case map[string]string:
		return types.NewStringStringMap(types.DefaultTypeAdapter, x)
	case map[string]int64:
		m := make(map[string]ref.Val, len(x))
		for k, n := range x {
			m[k] = types.Int(n)
		}
		return types.NewMap(types.DefaultTypeAdapter, m)
	case []any:
		l := make([]ref.Val, len(x))
		for i, e := range x {
			l[i] = celValue(e)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, l)
	case map[string]any:
		m := make(map[string]ref.Val, len(x))
		for k, e := range x {
			m[k] = celValue(e)
		}
		return types.NewMap(types.DefaultTypeAdapter, m)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}
