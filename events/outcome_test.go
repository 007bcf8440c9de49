package events

import "testing"

func TestOutcome_Valid(t *testing.T) {
	tests := []struct {
		o    Outcome
		want bool
	}{
		{Allow, true},
		{Deny, true},
		{Abort, true},
		{RequireApproval, true},
		{OutcomeError, false}, // recorded by the runtime, never a policy's answer
		{"", false},
		{"ALLOW", false},
		{"approve", false},
		{"allow ", false},
	}
	for _, tt := range tests {
		if got := tt.o.Valid(); got != tt.want {
			t.Errorf("Outcome(%q).Valid() = %v, want %v", tt.o, got, tt.want)
		}
	}
}
