package jsonform

import "testing"

// benchDoc is a realistic ~1 KiB tool-call arguments document: unsorted
// keys, nesting, escapes and some non-ASCII text.
const benchDoc = `{
  "tool": "fs.write_file",
  "call_id": "call_01J9ZQ4V7W8X2Y3Z4A5B6C7D8E",
  "arguments": {
    "path": "/workspace/reports/q3-summary.md",
    "content": "# Q3 summary\n\nRevenue grew 12% quarter over quarter.\n\n| region | delta |\n|---|---|\n| EMEA | +8% |\n| APAC | +15% |\n\nNotes: \"preliminary\" figures; see \\\\share\\finance for details. Café ☕ \u2014 draft.\n",
    "mode": 420,
    "create_dirs": true,
    "overwrite": false,
    "encoding": "utf-8",
    "tags": ["report", "finance", "q3", "draft"],
    "limits": {"max_bytes": 1048576, "timeout_ms": 1500.0, "retries": 3}
  },
  "agent": {
    "name": "analyst-7",
    "session": "sess_4f2a9c",
    "model": "example-model-large",
    "temperature": 0.2,
    "labels": {"team": "finance", "env": "prod", "owner": "ops@example.com"}
  },
  "context": {
    "cwd": "/workspace",
    "env_allowlist": ["HOME", "PATH", "LANG"],
    "previous_calls": [
      {"tool": "fs.read_file", "path": "/workspace/data/q3.csv", "ok": true, "bytes": 20480},
      {"tool": "shell.exec", "argv": ["python3", "summarize.py", "--quarter", "3"], "ok": true, "exit": 0}
    ],
    "note": null
  }
}`

func BenchmarkCheck(b *testing.B) {
	doc := []byte(benchDoc)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPolicyJSON(b *testing.B) {
	doc := []byte(benchDoc)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PolicyJSON(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendPolicyJSON(b *testing.B) {
	doc := []byte(benchDoc)
	buf := make([]byte, 0, len(doc))
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendPolicyJSON(buf[:0], doc); err != nil {
			b.Fatal(err)
		}
	}
}
