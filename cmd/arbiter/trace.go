package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/arbiter-run/arbiter/events"
)

// printTrace writes one readable line per event.
func printTrace(w io.Writer, recs []events.Record) {
	for _, r := range recs {
		fmt.Fprintf(w, "  #%-3d %-20s %s\n", r.Event.Seq, r.Event.Kind, summary(r.Event))
	}
}

func summary(e events.Event) string {
	switch e.Kind {
	case events.RunCreated:
		b, _ := events.DecodeBody[events.RunCreatedBody](e)
		return fmt.Sprintf("agent=%s tools=%s", b.Agent, toolNames(b.Tools))
	case events.RunTools:
		b, _ := events.DecodeBody[events.RunToolsBody](e)
		return "tools=" + toolNames(b.Tools)
	case events.StepDecided:
		b, _ := events.DecodeBody[events.StepDecidedBody](e)
		s := fmt.Sprintf("step %d: %s %s", b.Step, b.Tool, clip(string(b.RawArgs()), 70))
		if b.Policy != nil {
			s += fmt.Sprintf(": %s (%s)", b.Policy.Outcome, b.Policy.Reason)
		}
		return s
	case events.StepPolicy, events.ApprovalRequested:
		b, _ := events.DecodeBody[events.PolicyBody](e)
		s := fmt.Sprintf("step %d: %s (%s)", b.Step, b.Outcome, b.Reason)
		if b.Consumes != "" {
			s += " consuming grant " + b.Consumes
		}
		if b.Approval != nil {
			s += fmt.Sprintf(" approval %s kind=%s hash=%.12s…", b.Approval.ID, b.Approval.Kind, b.Approval.Hash)
		}
		return s
	case events.StepObserved:
		b, _ := events.DecodeBody[events.ObservedBody](e)
		return fmt.Sprintf("step %d: %s: %s", b.Step, b.Kind, clip(b.Content, 80))
	case events.StepInterrupted:
		b, _ := events.DecodeBody[events.InterruptedBody](e)
		return fmt.Sprintf("step %d: %s", b.Step, b.Resolution)
	case events.ApprovalGranted, events.ApprovalDenied:
		b, _ := events.DecodeBody[events.DecisionBody](e)
		return fmt.Sprintf("approval %s by %.12s… (%s)", b.Approval, b.Operator, b.Reason)
	case events.ApprovalRefused:
		b, _ := events.DecodeBody[events.RefusedBody](e)
		return fmt.Sprintf("approval %s: %s", b.Approval, b.Reason)
	case events.RunFinished, events.RunFailed, events.RunCancelled:
		b, _ := events.DecodeBody[events.EndBody](e)
		if o := b.Observation; o != nil {
			return fmt.Sprintf("%s with step %d's %s: %s", b.Reason, o.Step, o.Kind, clip(b.Result, 60))
		}
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", b.Reason, b.Detail, clip(b.Result, 60)))
	case events.ModelAttempted:
		b, _ := events.DecodeBody[events.ModelAttemptBody](e)
		return fmt.Sprintf("call %d attempt %d: %s %s, reserving %d in %d out tokens", b.Call, b.Attempt, b.Provider, b.Model, b.Reserve.InputTokens, b.Reserve.OutputTokens)
	case events.ModelReplied:
		b, _ := events.DecodeBody[events.ModelReplyBody](e)
		return fmt.Sprintf("call %d: %s, %d tool calls, %d in %d out tokens, %d ms: %s", b.Call, b.Finish, len(b.ToolCalls), b.Usage.InputTokens, b.Usage.OutputTokens, b.LatencyMS, clip(b.Text, 50))
	case events.ModelFailed:
		b, _ := events.DecodeBody[events.ModelFailBody](e)
		return fmt.Sprintf("call %d attempt %d: status %d retryable=%t: %s", b.Call, b.Attempt, b.Status, b.Retryable, clip(b.Error, 60))
	}
	var v any
	_ = json.Unmarshal(e.Body, &v)
	return clip(fmt.Sprint(v), 80)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", "⏎")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

func toolNames(ts []events.ToolSpec) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name + "(" + string(t.SideEffect) + ")"
	}
	return strings.Join(names, " ")
}
