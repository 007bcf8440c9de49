package layout

import "testing"

func TestLayout_Names(t *testing.T) {
	tests := []struct{ got, want string }{
		{ShardStream(RunStream, 0), "ARB_RUNS_0"},
		{ShardStream(RunStream, 11), "ARB_RUNS_11"},
		{ShardConsumer(NotifyConsumer, 2), "arbiter_notify_2"},
		{ShardPrefix(RunPrefix, 1, 0), "arb.run"},
		{ShardPrefix(RunPrefix, 4, 3), "arb.run.3"},
		{KVStream(ViewsBucket), "KV_ARB_VIEWS"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
