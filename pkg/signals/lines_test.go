package signals

import (
	"strings"
	"testing"
)

// TestNextLine cuts bodies into logical lines where textparse ends its
// series: a raw newline inside a quoted label value, label name, metric name
// or HELP/TYPE name continues the line; anywhere else it ends it.
func TestNextLine(t *testing.T) {
	tests := []struct {
		name string
		body string
		om   bool
		want []string
	}{
		{"plain lines", "a 1\nb{c=\"d\"} 2\n", false, []string{"a 1", "b{c=\"d\"} 2"}},
		{"newline in a label value", "a{b=\"x\ny\"} 1\nc 2", false, []string{"a{b=\"x\ny\"} 1", "c 2"}},
		{"issue 19", issue19Attacker, false, []string{
			"vllm:num_requests_waiting{engine=\"0\",model_name=\"a\nvllm:num_requests_running{\"} 5",
			"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1",
			"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 7",
			"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5",
		}},
		{"escaped quote", "a{b=\"x\\\"\ny\"} 1\nc 2", false, []string{"a{b=\"x\\\"\ny\"} 1", "c 2"}},
		{"escaped backslash closes", "a{b=\"x\\\\\"} 1\nc 2", false, []string{"a{b=\"x\\\\\"} 1", "c 2"}},
		{"quoted metric name", "{\"a\nb\",c=\"d\"} 1\ne 2", false, []string{"{\"a\nb\",c=\"d\"} 1", "e 2"}},
		{"blank before the label set", "a {b=\"x\ny\"} 1\n", false, []string{"a {b=\"x\ny\"} 1"}},
		{"HELP with a quoted name", "# HELP \"a\nb\" text\nc 1\n", false, []string{"# HELP \"a\nb\" text", "c 1"}},
		{"comment quote is text", "# a \"b\nc 1\n", false, []string{"# a \"b", "c 1"}},
		{"quote in a value is not one", "a 1\"\nb 2\n", false, []string{"a 1\"", "b 2"}},
		{"never closed", "a{b=\"x\nc 1\nd 2", false, []string{"a{b=\"x", "c 1", "d 2"}},
		{"OpenMetrics UNIT", "# UNIT \"a\nb\" s\nc 1\n", true, []string{"# UNIT \"a\nb\" s", "c 1"}},
		{"text format UNIT is a comment", "# UNIT \"a\nb\" s\nc 1\n", false, []string{"# UNIT \"a", "b\" s", "c 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			body, join := []byte(tt.body), true
			for len(body) > 0 {
				line, rest, n, failed := nextLine(body, tt.om, join)
				if n != strings.Count(string(line), "\n")+1 && !failed {
					t.Errorf("%q: %d physical lines", line, n)
				}
				join = join && !failed
				got = append(got, string(line))
				body = rest
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("lines %q, want %q", got, tt.want)
			}
		})
	}
}
