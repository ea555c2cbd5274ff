package main

import (
	"strings"
	"testing"
)

func TestParseMetricsAndLogDelta(t *testing.T) {
	before, err := parseMetrics(strings.NewReader(`# HELP chubby_commands_total Commands applied.
# TYPE chubby_commands_total counter
chubby_commands_total{op="acquire",outcome="ok"} 100
chubby_commands_total{op="release",outcome="ok"} 100
chubby_log_batch_entries_sum 200
chubby_log_batch_entries_count 50
chubby_log_append_seconds_sum 0.01
chubby_log_append_seconds_count 50
chubby_log_batch_entries_bucket{le="+Inf"} 50
malformed line here
`))
	if err != nil {
		t.Fatal(err)
	}
	if before["chubby_commands_total"] != 200 {
		t.Errorf("commands summed over labels = %v, want 200", before["chubby_commands_total"])
	}
	after := map[string]float64{
		"chubby_commands_total":           1200,
		"chubby_log_batch_entries_sum":    1200,
		"chubby_log_batch_entries_count":  150,
		"chubby_log_append_seconds_sum":   0.06,
		"chubby_log_append_seconds_count": 150,
	}
	st := logDelta(before, after, 2)
	if st.CommandsPerS != 500 || st.FsyncsPerS != 50 || st.EntriesPerFsync != 10 || st.AppendMeanMs < 0.499 || st.AppendMeanMs > 0.501 {
		t.Errorf("logDelta = %+v, want 500 commands/s, 50 fsyncs/s, 10 entries per fsync, 0.5 ms", st)
	}
}
