package testkit

import (
	"encoding/json"
	"math/big"
	"strconv"
)

// integer draws an integer within the bounds, a multiple of multipleOf
// where there is one, picking either bound one time in eight each.
func (g *gen) integer(s map[string]any) any {
	lo, hi := g.bounds(s)
	loI := ceilRat(lo)
	if exclusive(s, "exclusiveMinimum", lo) && lo.IsInt() {
		loI.Add(loI, big.NewInt(1))
	}
	hiI := floorRat(hi)
	if exclusive(s, "exclusiveMaximum", hi) && hi.IsInt() {
		hiI.Sub(hiI, big.NewInt(1))
	}
	step := big.NewInt(1)
	if m, ok := rat(s["multipleOf"]); ok && m.Sign() > 0 {
		// An integer v is a multiple of p/q (lowest terms) exactly when p
		// divides v.
		step = new(big.Int).Set(m.Num())
	}
	kLo := ceilDiv(loI, step)
	kHi := floorDiv(hiI, step)
	k := g.between(kLo, kHi)
	return json.Number(k.Mul(k, step).String())
}

// number draws a number within the bounds: a multiple of multipleOf where
// there is one (exact, as a decimal), otherwise an integer or a short
// decimal.
func (g *gen) number(s map[string]any) any {
	lo, hi := g.bounds(s)
	exLo := exclusive(s, "exclusiveMinimum", lo)
	exHi := exclusive(s, "exclusiveMaximum", hi)
	if m, ok := rat(s["multipleOf"]); ok && m.Sign() > 0 {
		kLo := ceilRat(new(big.Rat).Quo(lo, m))
		if exLo && new(big.Rat).Mul(new(big.Rat).SetInt(kLo), m).Cmp(lo) == 0 {
			kLo.Add(kLo, big.NewInt(1))
		}
		kHi := floorRat(new(big.Rat).Quo(hi, m))
		if exHi && new(big.Rat).Mul(new(big.Rat).SetInt(kHi), m).Cmp(hi) == 0 {
			kHi.Sub(kHi, big.NewInt(1))
		}
		v := new(big.Rat).Mul(new(big.Rat).SetInt(g.between(kLo, kHi)), m)
		return json.Number(decimal(v))
	}
	inside := func(v *big.Rat) bool {
		c1, c2 := v.Cmp(lo), v.Cmp(hi)
		return c1 > 0 && c2 < 0 || c1 == 0 && !exLo || c2 == 0 && !exHi
	}
	if g.r.IntN(2) == 0 {
		kLo, kHi := ceilRat(lo), floorRat(hi)
		if kLo.Cmp(kHi) <= 0 {
			v := new(big.Rat).SetInt(g.between(kLo, kHi))
			if inside(v) {
				return json.Number(v.RatString())
			}
		}
	}
	lf, _ := lo.Float64()
	hf, _ := hi.Float64()
	f := lf + (hf-lf)*g.r.Float64()
	for _, prec := range []int{2, -1} {
		str := strconv.FormatFloat(f, 'f', prec, 64)
		if v, ok := new(big.Rat).SetString(str); ok && inside(v) {
			return json.Number(str)
		}
	}
	return json.Number(decimal(lo))
}

// genSpan is how wide a range the generator draws from when a schema
// leaves one side (or both) open; genLimit clamps bounds so values stay
// exactly representable as float64 for policies that decode them.
var (
	genSpan  = big.NewRat(1000, 1)
	genLimit = new(big.Rat).SetInt64(1 << 53)
)

// bounds returns the numeric range [lo, hi] from minimum/maximum and the
// exclusive keywords in either draft form, filling an open side with
// genSpan and clamping to ±genLimit.
func (g *gen) bounds(s map[string]any) (lo, hi *big.Rat) {
	lo, hasLo := rat(s["minimum"])
	if x, ok := rat(s["exclusiveMinimum"]); ok && (!hasLo || x.Cmp(lo) >= 0) {
		lo, hasLo = x, true
	}
	hi, hasHi := rat(s["maximum"])
	if x, ok := rat(s["exclusiveMaximum"]); ok && (!hasHi || x.Cmp(hi) <= 0) {
		hi, hasHi = x, true
	}
	switch {
	case !hasLo && !hasHi:
		lo, hi = new(big.Rat).Neg(genSpan), new(big.Rat).Set(genSpan)
	case !hasLo:
		lo = new(big.Rat).Sub(hi, genSpan)
	case !hasHi:
		hi = new(big.Rat).Add(lo, genSpan)
	}
	neg := new(big.Rat).Neg(genLimit)
	if lo.Cmp(neg) < 0 {
		lo = neg
	}
	if hi.Cmp(genLimit) > 0 {
		hi = new(big.Rat).Set(genLimit)
	}
	return lo, hi
}

// exclusive reports whether the bound v of keyword k (exclusiveMinimum or
// exclusiveMaximum) is exclusive: the keyword is true (draft 4) or is the
// number v itself (later drafts).
func exclusive(s map[string]any, k string, v *big.Rat) bool {
	switch x := s[k].(type) {
	case bool:
		return x
	case json.Number:
		r, ok := rat(x)
		return ok && r.Cmp(v) == 0
	}
	return false
}

// between draws an integer in [lo, hi], each bound one time in eight; lo
// when the range is empty (the document will not fit).
func (g *gen) between(lo, hi *big.Int) *big.Int {
	if lo.Cmp(hi) >= 0 {
		return new(big.Int).Set(lo)
	}
	switch g.r.IntN(8) {
	case 0:
		return new(big.Int).Set(lo)
	case 1:
		return new(big.Int).Set(hi)
	}
	span := new(big.Int).Sub(hi, lo)
	span.Add(span, big.NewInt(1))
	off := new(big.Int)
	if span.IsUint64() {
		off.SetUint64(g.r.Uint64N(span.Uint64()))
	}
	return off.Add(off, lo)
}

// floorRat rounds r down. big.Int.Div is Euclidean division and a Rat's
// denominator is positive, so the quotient is the floor.
func floorRat(r *big.Rat) *big.Int {
	return new(big.Int).Div(r.Num(), r.Denom())
}

func ceilRat(r *big.Rat) *big.Int {
	q := floorRat(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func floorDiv(a, b *big.Int) *big.Int {
	return floorRat(new(big.Rat).SetFrac(a, b))
}

func ceilDiv(a, b *big.Int) *big.Int {
	return ceilRat(new(big.Rat).SetFrac(a, b))
}

// decimal writes r, whose denominator divides a power of ten (as every
// JSON number's does), as an exact decimal.
func decimal(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	d := new(big.Int).Set(r.Denom())
	digits := 0
	ten, zero := big.NewInt(10), big.NewInt(0)
	for p := big.NewInt(1); digits < 400; digits++ {
		if new(big.Int).Mod(p, d).Cmp(zero) == 0 {
			break
		}
		p.Mul(p, ten)
	}
	return r.FloatString(digits)
}

// genRepeatCap is how many repetitions past its minimum the generator
// draws for *, + and an open {n,}.
const genRepeatCap = 3
