package jsonform_test

import (
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/jsonform"
)

func ExampleValidate() {
	fmt.Println(jsonform.Validate([]byte(`{"path": "/tmp/x", "mode": 420}`)))

	err := jsonform.Validate([]byte(`{"args": {"path": "/a", "\u0070ath": "/b"}}`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, jsonform.ErrDuplicateKey))

	var jerr *jsonform.Error
	if errors.As(jsonform.Validate([]byte(`[1, 2,]`)), &jerr) {
		fmt.Println(jerr.Offset, jerr.Pointer, jerr.Reason)
	}
	// Output:
	// <nil>
	// json at byte 24 (/args): repeated object key "path"
	// true
	// 6 /2 unexpected byte ']', expected a value
}

func ExamplePolicyJSON() {
	out, err := jsonform.PolicyJSON([]byte(`{
		"tool": "fs.write",
		"args": {"path": "\/tmp\/report.md", "mode": 4.20e2, "note": "\u003cdraft\u003e"}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))
	// Output:
	// {"args":{"mode":4.20e2,"note":"<draft>","path":"/tmp/report.md"},"tool":"fs.write"}
}
