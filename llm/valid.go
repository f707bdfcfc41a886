package llm

import (
	"encoding/binary"
	"math/bits"
)

// maxNesting is encoding/json's limit on nested arrays and objects: a
// document nested deeper is not valid to json.Valid.
const maxNesting = 10000

// validJSON reports whether b is one JSON value, exactly as json.Valid
// does (the same grammar, strings not checked for UTF-8, the same nesting
// limit). Every llm call checks its body and its response with it: in one
// pass of plain loops it costs a fraction of json.Valid, whose scanner
// calls a state function per byte. FuzzValidJSON compares the two.
// With validMembers it saves 10 % of an llm request's instructions: 147,178 → 131,939, callgrind.
func validJSON(b []byte) bool {
	_, ok := validValue(b, nil, false)
	return ok
}

// validMembers is validJSON that also appends to ms, in the same pass, the
// members of b when it is an object, as appendMembers would find them: a
// call's body and its response are each walked once to check them and to
// find their members.
func validMembers(b []byte, ms []member) ([]member, bool) {
	return validValue(b, ms, true)
}

func validValue(b []byte, ms []member, members bool) ([]member, bool) {
	var buf [64]byte
	open := buf[:0] // the containers open at i: '{' or '['
	// key is the top-level member's key being read, its value at val.
	var key []byte
	val := 0
	needKey := false // an object's key and colon come first, at i
	i := skipSpace(b, 0)
	for {
		if needKey {
			top := members && len(open) == 1
			var k []byte
			if k, i = validMemberKey(b, i, top); i < 0 {
				return ms, false
			}
			if top {
				key, val = k, i
			}
			needKey = false
		}
		// A value starts at i.
		if i >= len(b) {
			return ms, false
		}
		switch b[i] {
		case '{', '[':
			if len(open) >= maxNesting {
				return ms, false
			}
			c := b[i]
			open = append(open, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']'
				open, i = open[:len(open)-1], i+1
				break
			}
			needKey = c == '{'
			continue
		case '"':
			if i = validString(b, i); i < 0 {
				return ms, false
			}
		case 't':
			if i = validLiteral(b, i, "true"); i < 0 {
				return ms, false
			}
		case 'f':
			if i = validLiteral(b, i, "false"); i < 0 {
				return ms, false
			}
		case 'n':
			if i = validLiteral(b, i, "null"); i < 0 {
				return ms, false
			}
		default:
			if i = validNumber(b, i); i < 0 {
				return ms, false
			}
		}
		// A value ended at i: the containers it closes, then a comma
		// before the next one, or the end of the document. Each turn of
		// this loop is at the end of a value; at depth 1 in an object,
		// the value of a member.
		for {
			if members && len(open) == 1 && open[0] == '{' {
				ms = append(ms, member{key: key, val: val, end: i})
			}
			i = skipSpace(b, i)
			if len(open) == 0 {
				return ms, i == len(b)
			}
			if i >= len(b) {
				return ms, false
			}
			top := open[len(open)-1]
			if b[i] == top+2 {
				open, i = open[:len(open)-1], i+1
				continue
			}
			if b[i] != ',' {
				return ms, false
			}
			i = skipSpace(b, i+1)
			needKey = top == '{'
			break
		}
	}
}

// validKey checks an object's key and its colon at b[i], returning where
// the key's string ends and where its value starts, or -1 for the latter.
func validKey(b []byte, i int) (int, int) {
	if i >= len(b) || b[i] != '"' {
		return 0, -1
	}
	if i = validString(b, i); i < 0 {
		return 0, -1
	}
	end := i
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, -1
	}
	return end, skipSpace(b, i+1)
}

// validMemberKey is validKey returning the key too, unquoted, when want.
func validMemberKey(b []byte, i int, want bool) (key []byte, val int) {
	end, val := validKey(b, i)
	if val >= 0 && want {
		key = unquote(b[i:end])
	}
	return key, val
}

// validString checks the string at b[i] (its opening quote), returning the
// offset past it, or -1. It skips eight bytes at a time to the next quote,
// backslash or control byte: prompts are long strings.
func validString(b []byte, i int) int {
	i++
	for {
		if len(b)-i >= 8 {
			m := specialBytes(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(b) && !isSpecial(b[i]) {
				i++
			}
			if i >= len(b) {
				return -1
			}
		}
		// b[i] is a quote, a backslash or a control byte.
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
			i++
		default:
			return -1
		}
	}
}

// isSpecial reports whether c ends a string's plain run: a quote, a
// backslash or a control byte.
func isSpecial(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }

// specialBytes returns, for the eight bytes of x (the first in the lowest
// byte), a word whose lowest set bit is in the first that isSpecial, 0 when
// none is. (The classic tests for a zero byte and a byte below n: exact for
// the lowest such byte, the bits above it may be set falsely.)
func specialBytes(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"')
	s := x ^ (ones * '\\')
	return ((q-ones)&^q | (s-ones)&^s | (x-ones*0x20)&^x) & highs
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validLiteral checks that lit is at b[i], returning the offset past it,
// or -1.
func validLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// validNumber checks the number at b[i], returning the offset past it, or
// -1: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(b, i); i < 0 {
			return -1
		}
	}
	return i
}

// digits returns the offset past the one or more digits at b[i], or -1.
func digits(b []byte, i int) int {
	start := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}
