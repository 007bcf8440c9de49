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
	// Asked as the enforcing policy is (policy.Ask): a shadow that fails or
	// panics is recorded as an error, and changes nothing else.
	vd := policy.Ask(ctx, d.cfg.Shadow, req, *v)
	sb := &events.ShadowBody{PolicyID: policy.ID(d.cfg.Shadow), Outcome: vd.Outcome, Reason: vd.Reason, Parts: vd.Parts}
	switch {
	case vd.Err != nil:
		sb.Outcome, sb.Reason, sb.Parts = events.OutcomeError, vd.Err.Error(), nil
	case vd.Approval != nil:
		sb.ApprovalKind = vd.Approval.Kind
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
