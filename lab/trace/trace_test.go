package trace

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRead(t *testing.T) {
	t0 := time.Date(2023, 11, 16, 18, 15, 46, 680590000, time.UTC)
	tests := []struct {
		name    string
		in      string
		want    []Request
		wantErr string
	}{
		{
			name: "azure format",
			in: "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
				"2023-11-16 18:15:46.6805900,374,44\n" +
				"2023-11-16 18:15:50.9951690,396,109\n",
			want: []Request{
				{Time: t0, PromptTokens: 374, OutputTokens: 44},
				{Time: time.Date(2023, 11, 16, 18, 15, 50, 995169000, time.UTC), Offset: 4314579 * time.Microsecond, PromptTokens: 396, OutputTokens: 109},
			},
		},
		{
			name: "no fraction, no final newline, CRLF",
			in:   "timestamp,contexttokens,generatedtokens\r\n2023-11-16 18:15:46,1,1",
			want: []Request{{Time: time.Date(2023, 11, 16, 18, 15, 46, 0, time.UTC), PromptTokens: 1, OutputTokens: 1}},
		},
		{
			// Offsets count from the earliest row, wherever it stands: a row
			// earlier than the first is replayed, not dropped.
			name: "unsorted rows",
			in: "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
				"2023-11-16 18:15:50.9951690,396,109\n" +
				"2023-11-16 18:15:46.6805900,374,44\n" +
				"2023-11-16 18:15:48,10,20\n",
			want: []Request{
				{Time: time.Date(2023, 11, 16, 18, 15, 50, 995169000, time.UTC), Offset: 4314579 * time.Microsecond, PromptTokens: 396, OutputTokens: 109},
				{Time: t0, PromptTokens: 374, OutputTokens: 44},
				{Time: time.Date(2023, 11, 16, 18, 15, 48, 0, time.UTC), Offset: 1319410 * time.Microsecond, PromptTokens: 10, OutputTokens: 20},
			},
		},
		{
			name:    "a year-2300 row",
			in:      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n2300-01-01 00:00:00,1,1\n",
			wantErr: "more than 744h0m0s",
		},
		{
			name:    "years 1 and 9999 (Sub saturates)",
			in:      "TIMESTAMP,ContextTokens,GeneratedTokens\n9999-12-31 23:59:59,1,1\n0001-01-01 00:00:00,1,1\n",
			wantErr: "a timestamp is likely wrong",
		},
		{name: "header only", in: "TIMESTAMP,ContextTokens,GeneratedTokens\n"},
		{name: "empty", in: "", wantErr: "empty input"},
		{name: "wrong header", in: "time,prompt,output\n", wantErr: "column 1"},
		{name: "bad timestamp", in: "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", wantErr: "line 2: timestamp"},
		{name: "zero prompt", in: "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,1\n", wantErr: "ContextTokens"},
		{name: "bad output", in: "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,x\n", wantErr: "GeneratedTokens"},
		{name: "missing column", in: "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1\n", wantErr: "wrong number of fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got.Requests); diff != "" {
				t.Errorf("Read() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadFileAzureConversation(t *testing.T) {
	tr, err := ReadFile("../../data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(tr.Requests), 19366; got != want {
		t.Errorf("requests = %d, want %d", got, want)
	}
	if d := tr.Duration(); d < 58*time.Minute || d > time.Hour {
		t.Errorf("Duration() = %v, want about one hour", d)
	}
}
