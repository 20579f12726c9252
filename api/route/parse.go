package route

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxCondLen bounds the length of one condition in bytes; longer conditions
// are rejected before they are parsed.
const MaxCondLen = 64 << 10

// maxNesting bounds parentheses and "!" nesting so hostile input cannot
// exhaust the stack.
const maxNesting = 100

// ParseError is a problem at one place of a condition.
type ParseError struct {
	// Column is the 1-based position, in characters, of the problem.
	Column int
	// Msg says what is wrong, e.g. `unknown primitive "req_pat_in"`.
	Msg string
}

func (e *ParseError) Error() string { return fmt.Sprintf("column %d: %s", e.Column, e.Msg) }

// Cond is a compiled condition. It is immutable and safe for concurrent use.
type Cond struct {
	root *node
}

// Parse compiles a condition written in BFE's condition language:
// primitives like req_path_prefix_in("/static", false) combined with &&, ||,
// ! and parentheses (precedence: () > ! > && > ||). Errors are *ParseError
// with the column of the problem.
func Parse(cond string) (*Cond, error) {
	if len(cond) > MaxCondLen {
		return nil, &ParseError{Column: 1, Msg: fmt.Sprintf("condition is %d bytes, longer than the %d-byte limit", len(cond), MaxCondLen)}
	}
	if !utf8.ValidString(cond) {
		return nil, &ParseError{Column: 1, Msg: "condition is not valid UTF-8"}
	}
	p := parser{src: cond}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return nil, p.errAt(p.tok, "condition is empty")
	}
	n, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tokEOF {
		return nil, p.errAt(p.tok, fmt.Sprintf("unexpected %s after the end of the condition", p.tok.describe()))
	}
	return &Cond{root: n}, nil
}

// MustParse is Parse for constants; it panics on error.
func MustParse(cond string) *Cond {
	c, err := Parse(cond)
	if err != nil {
		panic(err)
	}
	return c
}

// IsDefault reports whether c is exactly default_t(), the condition of a
// product's last rule.
func (c *Cond) IsDefault() bool {
	return c.root.op == opPrim && c.root.prim.name == "default_t"
}

// String returns c in canonical form: it parses back to the same condition.
func (c *Cond) String() string {
	var b strings.Builder
	c.root.write(&b)
	return b.String()
}

// Match reports whether r satisfies c. It does not allocate, except to parse
// r's query or cookies the first time a primitive needs them (cached in r).
func (c *Cond) Match(r *Request) bool { return c.root.eval(r) }

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokString
	tokLParen
	tokRParen
	tokComma
	tokAnd
	tokOr
	tokNot
)

type token struct {
	kind tokKind
	pos  int    // byte offset in src
	text string // identifier or unquoted string value
	raw  string // source text of the token
}

func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of condition"
	case tokString:
		return "string " + truncate(t.raw)
	case tokIdent:
		return strconv.Quote(truncate(t.text))
	}
	return strconv.Quote(t.raw)
}

type parser struct {
	src   string
	pos   int
	tok   token
	depth int
}

func (p *parser) errAt(t token, msg string) *ParseError {
	return &ParseError{Column: utf8.RuneCountInString(p.src[:t.pos]) + 1, Msg: msg}
}

func (p *parser) errPos(pos int, msg string) *ParseError {
	return &ParseError{Column: utf8.RuneCountInString(p.src[:pos]) + 1, Msg: msg}
}

// next scans the next token into p.tok.
func (p *parser) next() error {
	for p.pos < len(p.src) && isSpace(p.src[p.pos]) {
		p.pos++
	}
	start := p.pos
	if start >= len(p.src) {
		p.tok = token{kind: tokEOF, pos: start}
		return nil
	}
	c := p.src[start]
	single := func(k tokKind) error {
		p.pos++
		p.tok = token{kind: k, pos: start, raw: p.src[start:p.pos]}
		return nil
	}
	switch {
	case c == '(':
		return single(tokLParen)
	case c == ')':
		return single(tokRParen)
	case c == ',':
		return single(tokComma)
	case c == '!':
		return single(tokNot)
	case c == '&' || c == '|':
		if start+1 < len(p.src) && p.src[start+1] == c {
			p.pos += 2
			k := tokAnd
			if c == '|' {
				k = tokOr
			}
			p.tok = token{kind: k, pos: start, raw: p.src[start:p.pos]}
			return nil
		}
		return p.errPos(start, fmt.Sprintf("%q is not an operator; want %q", string(c), string([]byte{c, c})))
	case c == '"':
		i := start + 1
		for ; i < len(p.src); i++ {
			if p.src[i] == '\\' {
				i++
				continue
			}
			if p.src[i] == '"' {
				break
			}
		}
		if i >= len(p.src) {
			return p.errPos(start, "string is not terminated")
		}
		raw := p.src[start : i+1]
		s, err := strconv.Unquote(raw)
		if err != nil {
			return p.errPos(start, fmt.Sprintf("string %s has an invalid escape", truncate(raw)))
		}
		p.pos = i + 1
		p.tok = token{kind: tokString, pos: start, text: s, raw: raw}
		return nil
	case isIdentStart(c):
		i := start + 1
		for i < len(p.src) && isIdentPart(p.src[i]) {
			i++
		}
		p.pos = i
		p.tok = token{kind: tokIdent, pos: start, text: p.src[start:i], raw: p.src[start:i]}
		return nil
	}
	r, _ := utf8.DecodeRuneInString(p.src[start:])
	return p.errPos(start, fmt.Sprintf("unexpected character %q", r))
}

// or := and { "||" and }
func (p *parser) or() (*node, error) {
	left, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokOr {
		if err := p.next(); err != nil {
			return nil, err
		}
		right, err := p.and()
		if err != nil {
			return nil, err
		}
		left = &node{op: opOr, left: left, right: right}
	}
	return left, nil
}

// and := unary { "&&" unary }
func (p *parser) and() (*node, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokAnd {
		if err := p.next(); err != nil {
			return nil, err
		}
		right, err := p.unary()
		if err != nil {
			return nil, err
		}
		left = &node{op: opAnd, left: left, right: right}
	}
	return left, nil
}

// unary := "!" unary | "(" or ")" | primitive
func (p *parser) unary() (*node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxNesting {
		return nil, p.errAt(p.tok, fmt.Sprintf("condition is nested deeper than %d levels", maxNesting))
	}
	switch p.tok.kind {
	case tokNot:
		if err := p.next(); err != nil {
			return nil, err
		}
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &node{op: opNot, left: n}, nil
	case tokLParen:
		open := p.tok
		if err := p.next(); err != nil {
			return nil, err
		}
		n, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			if p.tok.kind == tokEOF {
				return nil, p.errAt(open, "unbalanced parenthesis: \"(\" is never closed")
			}
			return nil, p.errAt(p.tok, fmt.Sprintf("unexpected %s; want \")\" or an operator", p.tok.describe()))
		}
		if err := p.next(); err != nil {
			return nil, err
		}
		return n, nil
	case tokIdent:
		return p.primitive()
	case tokRParen:
		return nil, p.errAt(p.tok, "unbalanced parenthesis: unexpected \")\"")
	}
	return nil, p.errAt(p.tok, fmt.Sprintf("unexpected %s; want a primitive, \"!\" or \"(\"", p.tok.describe()))
}

// primitive := ident "(" [ arg { "," arg } ] ")"
func (p *parser) primitive() (*node, error) {
	name := p.tok
	sig, ok := signatures[name.text]
	if !ok {
		if name.text == "true" || name.text == "false" {
			return nil, p.errAt(name, fmt.Sprintf("%s is not a condition; use default_t() for a rule that always matches", name.text))
		}
		return nil, p.errAt(name, fmt.Sprintf("unknown primitive %q", truncate(name.text)))
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind != tokLParen {
		return nil, p.errAt(p.tok, fmt.Sprintf("want \"(\" after %s, have %s", name.text, p.tok.describe()))
	}
	open := p.tok
	if err := p.next(); err != nil {
		return nil, err
	}
	var args []arg
	for p.tok.kind != tokRParen {
		if len(args) > 0 {
			if p.tok.kind != tokComma {
				if p.tok.kind == tokEOF {
					return nil, p.errAt(open, "unbalanced parenthesis: \"(\" is never closed")
				}
				return nil, p.errAt(p.tok, fmt.Sprintf("unexpected %s in the arguments of %s; want \",\" or \")\"", p.tok.describe(), name.text))
			}
			if err := p.next(); err != nil {
				return nil, err
			}
		}
		a, err := p.arg(name.text)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	closing := p.tok
	if err := p.next(); err != nil {
		return nil, err
	}
	if len(args) != len(sig.params) {
		return nil, p.errAt(name, fmt.Sprintf("%s takes %d argument%s %s, have %d", name.text, len(sig.params), plural(len(sig.params)), sig.usage(name.text), len(args)))
	}
	for i, a := range args {
		if a.isBool != (sig.params[i].kind == kindBool) {
			want := "a string"
			if sig.params[i].kind == kindBool {
				want = "true or false"
			}
			return nil, p.errPos(a.pos, fmt.Sprintf("argument %d (%s) of %s must be %s", i+1, sig.params[i].name, name.text, want))
		}
	}
	prim, err := sig.build(args)
	if err != nil {
		bad := name.pos
		if err.arg >= 0 {
			bad = args[err.arg].pos
		}
		return nil, p.errPos(bad, fmt.Sprintf("%s: %s", name.text, err.msg))
	}
	_ = closing
	return &node{op: opPrim, prim: primitive{name: name.text, args: args, m: prim}}, nil
}

func (p *parser) arg(prim string) (arg, error) {
	t := p.tok
	switch {
	case t.kind == tokString:
		if err := p.next(); err != nil {
			return arg{}, err
		}
		return arg{pos: t.pos, s: t.text}, nil
	case t.kind == tokIdent && (t.text == "true" || t.text == "false"):
		if err := p.next(); err != nil {
			return arg{}, err
		}
		return arg{pos: t.pos, isBool: true, b: t.text == "true"}, nil
	case t.kind == tokEOF:
		return arg{}, p.errAt(t, fmt.Sprintf("unbalanced parenthesis: the arguments of %s are never closed", prim))
	}
	return arg{}, p.errAt(t, fmt.Sprintf("unexpected %s in the arguments of %s; want a \"string\", true or false", t.describe(), prim))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdentStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
