package rules

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/ext"
)

// CostLimit bounds what one condition may cost when evaluated (CEL's cost
// units: about one per operation, a list or string comprehension the size of
// its input). A condition that runs over it fails closed.
const CostLimit = 10_000

// MaxConditionLen bounds a condition's source, in code points.
const MaxConditionLen = 4096

// The variables a condition sees. Everything is taken from the request and
// the run view; nothing is read from a clock or the network, so a replay
// sees the same values.
var celEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("tool", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("args", cel.DynType),
		cel.Variable("run", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("actor", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("user", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true),
		cel.ParserExpressionSizeLimit(MaxConditionLen),
		cel.ParserRecursionLimit(64),
		ext.Strings(),
	)
	if err != nil {
		panic(err)
	}
	return env
}()

// compileCondition compiles src to a program that must yield a bool. The
// error says where in the expression and what is wrong.
func compileCondition(src string) (cel.Program, error) {
	prg, _, err := compileChecked(src)
	return prg, err
}

// compileChecked is compileCondition, also returning the checked
// expression when the program runs without cost tracking (nil otherwise):
// what [newFolder] may fold.
func compileChecked(src string) (cel.Program, *cel.Ast, error) {
	ast, iss := celEnv.Compile(src)
	if iss != nil && iss.Err() != nil {
		var msgs []string
		for _, e := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return nil, nil, fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, nil, fmt.Errorf("yields %s, want bool", t)
	}
	// A condition whose worst case is bounded below the limit (no
	// comprehension, no operation over a string or list of unknown size)
	// cannot run over it: it is run without tracking its cost, which would
	// double the price of a cheap condition. Any other is tracked, and
	// stopped at the limit.
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	checked := ast
	if est, err := celEnv.EstimateCost(ast, unknownSizes{}); err != nil || est.Max > CostLimit {
		opts = append(opts, cel.CostLimit(CostLimit))
		checked = nil
	}
	prg, err := celEnv.Program(ast, opts...)
	if err != nil {
		return nil, nil, err
	}
	return prg, checked, nil
}

// unknownSizes leaves every size and call to CEL's own worst-case model:
// nothing is known about the inputs.
type unknownSizes struct{}

func (unknownSizes) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

func (unknownSizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}
