package rules

import (
	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
	"cel.dev/cel-go/parser"
)

// A condition is often part tool, part call: `args.amount > 500 &&
// tool.side_effect == 'remote_mutation'`. What it reads of the tool is the
// same for every call of one spec, so it is worked out once per spec hash
// (with the spec's candidates, see [specRules]) and the condition run as
// the rest of it: the folded condition.
//
// Folding only substitutes values, so the folded condition answers what
// the condition answers, errors included:
//   - a tool leaf (an operand of &&, || or ! that names no variable but
//     tool and holds no comprehension) is evaluated, once per spec, by the
//     condition's own rules; one that yields a bool is replaced by that
//     literal, and one with any other result (an error, a non-bool) is
//     left in place, to be evaluated on every call as before;
//   - then, on CEL's own laws: false && x and x && false are false, true
//     || x and x || true are true, whatever x is (an error too); x && true
//     and x || false are x only where the checker typed x bool (so x is a
//     bool or an error, and the operation gives back x as it is);
//     !literal is its negation.
//
// Only conditions run without cost tracking are folded (a condition whose
// worst case is bounded below the limit); any other is run whole, so the
// limit is counted as before.
type folder struct {
	checked *cel.Ast
	leaves  []leaf
}

type leaf struct {
	id  int64
	prg cel.Program
}

// folded is a condition for one spec: a constant, or a program.
type folded struct {
	constant, holds bool
	prg             cel.Program
}

// newFolder returns a folder for the checked condition a, or nil when it
// reads nothing of the tool that could be folded.
func newFolder(a *cel.Ast) *folder {
	f := &folder{checked: a}
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		if e.Kind() == ast.CallKind && isLogical(e.AsCall().FunctionName()) {
			for _, x := range e.AsCall().Args() {
				walk(x)
			}
			return
		}
		if !toolOnly(e) {
			return
		}
		sub := ast.NewAST(e, a.NativeRep().SourceInfo())
		src, err := parser.Unparse(sub.Expr(), sub.SourceInfo())
		if err != nil {
			return
		}
		la, iss := celEnv.Compile(src)
		if iss != nil && iss.Err() != nil {
			return
		}
		prg, err := celEnv.Program(la, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			return
		}
		f.leaves = append(f.leaves, leaf{id: e.ID(), prg: prg})
	}
	walk(a.NativeRep().Expr())
	if len(f.leaves) == 0 {
		return nil
	}
	return f
}

func isLogical(fn string) bool {
	return fn == operators.LogicalAnd || fn == operators.LogicalOr || fn == operators.LogicalNot
}

// toolOnly reports whether e names the variable tool and no other, and
// holds no comprehension (whose own variables would need telling apart).
func toolOnly(e ast.Expr) bool {
	names, ok := 0, true
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		if !ok {
			return
		}
		switch e.Kind() {
		case ast.IdentKind:
			if e.AsIdent() != "tool" {
				ok = false
			}
			names++
		case ast.SelectKind:
			walk(e.AsSelect().Operand())
		case ast.CallKind:
			c := e.AsCall()
			if c.IsMemberFunction() {
				walk(c.Target())
			}
			for _, x := range c.Args() {
				walk(x)
			}
		case ast.ListKind:
			for _, x := range e.AsList().Elements() {
				walk(x)
			}
		case ast.MapKind:
			for _, en := range e.AsMap().Entries() {
				me := en.AsMapEntry()
				walk(me.Key())
				walk(me.Value())
			}
		case ast.LiteralKind:
		default: // comprehensions, structs, anything else
			ok = false
		}
	}
	walk(e)
	return ok && names > 0
}

// fold evaluates the tool leaves for ev's tool and builds what is left;
// nil when nothing folds.
func (f *folder) fold(ev *evaluation) *folded {
	tool := toolOnlyActivation{ev: ev}
	values := map[int64]bool{}
	for _, l := range f.leaves {
		out, _, err := l.prg.Eval(tool)
		if err != nil {
			continue
		}
		if b, ok := out.(types.Bool); ok {
			values[l.id] = bool(b)
		}
	}
	if len(values) == 0 {
		return nil
	}
	native := f.checked.NativeRep()
	fac := ast.NewExprFactory()
	root := fac.CopyExpr(native.Expr())
	var simplify func(e ast.Expr) ast.Expr
	// A literal takes a new id: its node's id may name a macro call (has)
	// in the source info, which would print the macro again.
	next := int64(0)
	lit := func(_ ast.Expr, b bool) ast.Expr { next--; return fac.NewLiteral(next, types.Bool(b)) }
	isLit := func(e ast.Expr, b bool) bool {
		if e.Kind() != ast.LiteralKind {
			return false
		}
		v, ok := e.AsLiteral().(types.Bool)
		return ok && bool(v) == b
	}
	isBool := func(e ast.Expr) bool {
		if isLit(e, true) || isLit(e, false) {
			return true
		}
		t := native.GetType(e.ID())
		return t != nil && t.IsExactType(types.BoolType)
	}
	simplify = func(e ast.Expr) ast.Expr {
		if b, ok := values[e.ID()]; ok {
			return lit(e, b)
		}
		if e.Kind() != ast.CallKind || !isLogical(e.AsCall().FunctionName()) {
			return e
		}
		c := e.AsCall()
		args := c.Args()
		for i, x := range args {
			args[i] = simplify(x)
		}
		switch c.FunctionName() {
		case operators.LogicalNot:
			if args[0].Kind() == ast.LiteralKind {
				if v, ok := args[0].AsLiteral().(types.Bool); ok {
					return lit(e, !bool(v))
				}
			}
			return fac.NewCall(e.ID(), c.FunctionName(), args...)
		case operators.LogicalAnd, operators.LogicalOr:
			absorbing := c.FunctionName() == operators.LogicalOr // true || x
			var kept []ast.Expr
			for _, x := range args {
				if isLit(x, absorbing) {
					return lit(e, absorbing)
				}
				if isLit(x, !absorbing) && len(args) == 2 {
					continue // the identity: dropped below if the other is a bool
				}
				kept = append(kept, x)
			}
			if len(kept) == 0 {
				return lit(e, !absorbing) // true && true, false || false
			}
			if len(kept) == 1 && len(args) == 2 && isBool(kept[0]) {
				return kept[0]
			}
			return fac.NewCall(e.ID(), c.FunctionName(), args...)
		}
		return e
	}
	root = simplify(root)
	if root.Kind() == ast.LiteralKind {
		if v, ok := root.AsLiteral().(types.Bool); ok {
			return &folded{constant: true, holds: bool(v)}
		}
	}
	src, err := parser.Unparse(root, native.SourceInfo())
	if err != nil {
		return nil
	}
	prg, err := compileCondition(src)
	if err != nil {
		return nil
	}
	return &folded{prg: prg}
}

// toolOnlyActivation resolves tool alone: a tool leaf names nothing else.
type toolOnlyActivation struct{ ev *evaluation }

func (a toolOnlyActivation) ResolveName(name string) (any, bool) {
	if name == "tool" {
		return a.ev.ResolveName(name)
	}
	return nil, false
}

func (a toolOnlyActivation) Parent() interpreter.Activation { return nil }
