package testkit

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// pattern draws a string the regular expression matches, from its
// regexp/syntax parse tree (Perl flags, as Go's regexp compiles it). The
// string is a whole match, so it satisfies the pattern anchored or not.
func (g *gen) pattern(p string) (string, error) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return "", fmt.Errorf("%w: pattern %q: %w", ErrGenerate, p, err)
	}
	var b strings.Builder
	if err := g.emit(&b, re); err != nil {
		return "", fmt.Errorf("%w: pattern %q: %w", ErrGenerate, p, err)
	}
	return b.String(), nil
}

func (g *gen) emit(b *strings.Builder, re *syntax.Regexp) error {
	switch re.Op {
	case syntax.OpNoMatch:
		return errors.New("matches nothing")
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			b.WriteRune(r)
		}
		return nil
	case syntax.OpCharClass:
		b.WriteRune(g.classRune(re.Rune))
		return nil
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte(alphabet[g.r.IntN(len(alphabet))])
		return nil
	case syntax.OpCapture:
		return g.emit(b, re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if err := g.emit(b, sub); err != nil {
				return err
			}
		}
		return nil
	case syntax.OpAlternate:
		return g.emit(b, re.Sub[g.r.IntN(len(re.Sub))])
	case syntax.OpStar:
		return g.repeat(b, re.Sub[0], 0, genRepeatCap)
	case syntax.OpPlus:
		return g.repeat(b, re.Sub[0], 1, 1+genRepeatCap)
	case syntax.OpQuest:
		return g.repeat(b, re.Sub[0], 0, 1)
	case syntax.OpRepeat:
		hi := re.Max
		if hi < 0 || hi > re.Min+genRepeatCap {
			hi = re.Min + genRepeatCap
		}
		return g.repeat(b, re.Sub[0], re.Min, hi)
	}
	return fmt.Errorf("unsupported construct %v", re.Op)
}

func (g *gen) repeat(b *strings.Builder, re *syntax.Regexp, lo, hi int) error {
	n := lo + g.r.IntN(hi-lo+1)
	for range n {
		if err := g.emit(b, re); err != nil {
			return err
		}
	}
	return nil
}

// classRune draws a rune from a class given as lo-hi pairs, preferring
// printable ASCII so generated strings stay readable.
func (g *gen) classRune(ranges []rune) rune {
	count := 0
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := max(ranges[i], ' '), min(ranges[i+1], '~')
		if lo <= hi {
			count += int(hi - lo + 1)
		}
	}
	if count > 0 {
		k := rune(g.r.IntN(count))
		for i := 0; i+1 < len(ranges); i += 2 {
			lo, hi := max(ranges[i], ' '), min(ranges[i+1], '~')
			if lo > hi {
				continue
			}
			if k <= hi-lo {
				return lo + k
			}
			k -= hi - lo + 1
		}
	}
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		r := lo + rune(g.r.IntN(int(hi-lo)+1))
		if utf8.ValidRune(r) {
			return r
		}
		if utf8.ValidRune(lo) {
			return lo
		}
	}
	return 'a'
}
