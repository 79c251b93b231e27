package signals

import "bytes"

// A series line of the exposition format ends at a newline, except that a
// quoted string (a label value, a quoted label or metric name, the quoted
// name of a HELP or TYPE line) may hold a raw newline: Prometheus's lexer
// (model/textparse/promlex.l, `\"(\\.|[^\\"])*\"`; openmetricslex.l for
// quoted names) reads
//
//	vllm:num_requests_waiting{model_name="a
//	vllm:num_requests_running{"} 5
//
// as one series of vllm:num_requests_waiting whose model_name is
// "a\nvllm:num_requests_running{". The prefilter therefore reads logical
// lines: a physical line that ends inside a quoted string continues on the
// next, as it does for textparse, so that the prefilter, the series cache and
// textparse agree on where every series begins and ends.

// quoteState is where the lexer stands, as far as line ends go, after the
// bytes of a line scanned so far.
type quoteState uint8

const (
	qsStart     quoteState = iota // at the start of a line (blanks skipped)
	qsName                        // in a series line's metric name
	qsAfterName                   // in the blanks after it (text format)
	qsLabels                      // in a label set, outside quotes
	qsLabelQ                      // in a quoted string of a label set
	qsLabelQEsc                   // just after a backslash in one
	qsMetaQ                       // in the quoted metric name of a HELP, TYPE (or OpenMetrics UNIT) line
	qsMetaQEsc                    // just after a backslash in one
	qsDone                        // nothing further on the line can open a quote the lexer carries over
)

// open reports whether the state carries over a newline.
func (s quoteState) open() bool { return s >= qsLabelQ && s <= qsMetaQEsc }

// afterNewline is the state in which a continuation line starts: a backslash
// at the end of a line escaped its newline (which textparse rejects; the
// extraction then fails on that line, with or without the cache).
func (s quoteState) afterNewline() quoteState {
	switch s {
	case qsLabelQEsc:
		return qsLabelQ
	case qsMetaQEsc:
		return qsMetaQ
	}
	return s
}

// mayOpenQuote reports whether scanning line from the start might end in a
// quoted string: only with an odd number of '"' or a backslash. The exact
// answer needs scanQuotes; this one is a byte count (most lines have no
// quote or balanced ones).
func mayOpenQuote(line []byte) bool {
	n := bytes.Count(line, []byte{'"'})
	return n > 0 && (n&1 == 1 || bytes.IndexByte(line, '\\') >= 0)
}

// scanQuotes returns the lexer's state after line, starting in st. om selects
// the OpenMetrics lexer's comment syntax ("# HELP " with single spaces, and
// UNIT lines).
func scanQuotes(line []byte, st quoteState, om bool) quoteState {
	for i := 0; i < len(line) && st != qsDone; i++ {
		c := line[i]
		switch st {
		case qsStart:
			switch {
			case c == ' ' || c == '\t':
			case c == '#':
				return scanComment(line[i:], om)
			case c == '{':
				st = qsLabels
			case metricNameStart(c):
				st = qsName
			default:
				st = qsDone
			}
		case qsName:
			switch {
			case c == '{':
				st = qsLabels
			case metricNameStart(c) || c >= '0' && c <= '9':
			case (c == ' ' || c == '\t') && !om:
				// textparse reads a label set after blanks; OpenMetrics reads
				// " {" as (a bad) value.
				st = qsAfterName
			default:
				st = qsDone
			}
		case qsAfterName:
			switch c {
			case ' ', '\t':
			case '{':
				st = qsLabels
			default:
				st = qsDone
			}
		case qsLabels:
			switch c {
			case '"':
				st = qsLabelQ
			case '}':
				st = qsDone
			}
		case qsLabelQ:
			switch c {
			case '\\':
				st = qsLabelQEsc
			case '"':
				st = qsLabels
			}
		case qsMetaQ:
			switch c {
			case '\\':
				st = qsMetaQEsc
			case '"':
				st = qsDone // the rest of a HELP/TYPE line is text
			}
		case qsLabelQEsc:
			st = qsLabelQ // the escaped byte
		case qsMetaQEsc:
			st = qsMetaQ
		}
	}
	return st
}

// scanComment returns the state after a line starting with '#': open in the
// quoted metric name of a HELP or TYPE line (OpenMetrics: also UNIT) whose
// quote is not closed on the line, else done.
func scanComment(line []byte, om bool) quoteState {
	rest := line[1:]
	if om {
		var ok bool
		if rest, ok = bytes.CutPrefix(rest, []byte(" ")); !ok {
			return qsDone
		}
	} else {
		n := len(rest)
		rest = bytes.TrimLeft(rest, " \t")
		if len(rest) == n {
			return qsDone // "#HELP" is a comment
		}
	}
	kw := false
	for _, k := range []string{"HELP", "TYPE", "UNIT"} {
		if k == "UNIT" && !om {
			continue
		}
		if r, ok := bytes.CutPrefix(rest, []byte(k)); ok && len(r) > 0 && (r[0] == ' ' || (!om && r[0] == '\t')) {
			rest, kw = r, true
			break
		}
	}
	if !kw {
		return qsDone
	}
	if om {
		rest = rest[1:]
	} else {
		rest = bytes.TrimLeft(rest, " \t")
	}
	if len(rest) == 0 || rest[0] != '"' {
		return qsDone
	}
	return scanQuotes(rest[1:], qsMetaQ, om)
}

// nextLine cuts the next logical line off body: a physical line, continued
// over the following ones while it ends inside a quoted string. It returns
// the line (without its final newline), the rest of the body and the number
// of physical lines taken. With join unset, or when the quote never closes
// (textparse then rejects the body), the line is the physical line alone;
// failed reports the latter, after which the caller stops joining (a second
// scan to the end of the body per line would be quadratic).
func nextLine(body []byte, om, join bool) (line, rest []byte, physical int, failed bool) {
	i := bytes.IndexByte(body, '\n')
	if i < 0 {
		line, rest = body, nil
	} else {
		line, rest = body[:i], body[i+1:]
	}
	if !join || rest == nil || !mayOpenQuote(line) {
		return line, rest, 1, false
	}
	st := scanQuotes(line, qsStart, om)
	if !st.open() {
		return line, rest, 1, false
	}
	end, n := i, 1
	for end < len(body) {
		start := end + 1
		j := bytes.IndexByte(body[start:], '\n')
		stop := len(body)
		if j >= 0 {
			stop = start + j
		}
		st = scanQuotes(body[start:stop], st.afterNewline(), om)
		end, n = stop, n+1
		if !st.open() {
			if stop == len(body) {
				return body, nil, n, false
			}
			return body[:stop], body[stop+1:], n, false
		}
	}
	return line, rest, 1, true
}
