package llm

// maxNesting is encoding/json's limit on nested arrays and objects: a
// document nested deeper is not valid to json.Valid.
const maxNesting = 10000

// validJSON reports whether b is one JSON value, exactly as json.Valid
// does (the same grammar, strings not checked for UTF-8, the same nesting
// limit). Every llm call checks its body and its response with it: in one
// pass of plain loops it costs a fraction of json.Valid, whose scanner
// calls a state function per byte. FuzzValidJSON compares the two.
func validJSON(b []byte) bool {
	var buf [64]byte
	open := buf[:0] // the containers open at i: '{' or '['
	i := skipSpace(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '{', '[':
			if len(open) >= maxNesting {
				return false
			}
			c := b[i]
			open = append(open, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']'
				open, i = open[:len(open)-1], i+1
				break
			}
			if c == '{' {
				if i = validKey(b, i); i < 0 {
					return false
				}
			}
			continue
		case '"':
			if i = validString(b, i); i < 0 {
				return false
			}
		case 't':
			if i = validLiteral(b, i, "true"); i < 0 {
				return false
			}
		case 'f':
			if i = validLiteral(b, i, "false"); i < 0 {
				return false
			}
		case 'n':
			if i = validLiteral(b, i, "null"); i < 0 {
				return false
			}
		default:
			if i = validNumber(b, i); i < 0 {
				return false
			}
		}
		// A value ended at i: the containers it closes, then a comma
		// before the next one, or the end of the document.
		for {
			i = skipSpace(b, i)
			if len(open) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := open[len(open)-1]
			if b[i] == top+2 {
				open, i = open[:len(open)-1], i+1
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
			if top == '{' {
				if i = validKey(b, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// validKey checks an object's key and its colon at b[i], returning where
// its value starts, or -1.
func validKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = validString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// validString checks the string at b[i] (its opening quote), returning the
// offset past it, or -1.
func validString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
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
		}
	}
	return -1
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
