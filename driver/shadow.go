package driver

import (
	"context"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// shadow asks the shadow policy about req and records its answer on body,
// the result the enforcing policy's answer made: nothing of it is acted on.
func (d *Driver) shadow(ctx context.Context, req policy.Request, v *projector.View, body any) any {
	dec, err := d.cfg.Shadow.Evaluate(ctx, req.Copy(), v.Clone())
	sb := &events.ShadowBody{PolicyID: policy.ID(d.cfg.Shadow), Outcome: string(dec.Outcome), Reason: dec.Reason, Parts: dec.Parts}
	switch {
	case err != nil:
		sb.Outcome, sb.Reason, sb.Parts = events.OutcomeError, err.Error(), nil
	case !dec.Outcome.Valid():
		sb.Outcome, sb.Reason = events.OutcomeError, "outcome "+string(dec.Outcome)+" (want allow, deny, abort or require_approval)"
	case dec.Approval != nil:
		sb.ApprovalKind = dec.Approval.Kind
	}
	switch b := body.(type) {
	case events.PolicyBody:
		b.Shadow = sb
		return b
	case events.EndBody:
		if b.Policy != nil {
			p := *b.Policy
			p.Shadow = sb
			b.Policy = &p
		}
		return b
	}
	return body
}
