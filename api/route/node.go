package route

import (
	"strconv"
	"strings"
)

type opKind uint8

const (
	opPrim opKind = iota
	opNot
	opAnd
	opOr
)

// node is one operator or primitive of a compiled condition.
type node struct {
	op          opKind
	left, right *node // opNot uses left only
	prim        primitive
}

func (n *node) eval(r *Request) bool {
	switch n.op {
	case opAnd:
		return n.left.eval(r) && n.right.eval(r)
	case opOr:
		return n.left.eval(r) || n.right.eval(r)
	case opNot:
		return !n.left.eval(r)
	}
	return n.prim.m.match(r)
}

// write prints n with the fewest parentheses that keep its tree shape:
// && and || associate to the left, so a right operand of the same operator
// (written with explicit parentheses) keeps them.
func (n *node) write(b *strings.Builder) {
	switch n.op {
	case opPrim:
		n.prim.write(b)
	case opNot:
		b.WriteByte('!')
		n.left.writeGrouped(b, n.left.op == opAnd || n.left.op == opOr)
	case opAnd:
		n.left.writeGrouped(b, n.left.op == opOr)
		b.WriteString(" && ")
		n.right.writeGrouped(b, n.right.op == opOr || n.right.op == opAnd)
	case opOr:
		n.left.write(b)
		b.WriteString(" || ")
		n.right.writeGrouped(b, n.right.op == opOr)
	}
}

func (n *node) writeGrouped(b *strings.Builder, group bool) {
	if group {
		b.WriteByte('(')
	}
	n.write(b)
	if group {
		b.WriteByte(')')
	}
}

// primitive is a parsed call such as req_method_in("GET|HEAD").
type primitive struct {
	name string
	args []arg
	m    matcher
}

func (p primitive) write(b *strings.Builder) {
	b.WriteString(p.name)
	b.WriteByte('(')
	for i, a := range p.args {
		if i > 0 {
			b.WriteString(", ")
		}
		if a.isBool {
			b.WriteString(strconv.FormatBool(a.b))
		} else {
			b.WriteString(strconv.Quote(a.s))
		}
	}
	b.WriteByte(')')
}

// arg is one literal argument of a primitive.
type arg struct {
	pos    int // byte offset in the condition
	isBool bool
	s      string
	b      bool
}

// matcher is a primitive compiled for evaluation. match must not allocate.
type matcher interface {
	match(r *Request) bool
}
