package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
)

// The cell's own metrics (Prometheus text on chubbyd --http) tell what a
// CPU profile cannot: how many log entries each fsync carried and how long
// the write+fsync took, which is where a lock cycle's latency goes when the
// cell is not short of CPU.

// scrapeMetrics fetches Prometheus text from url (loopback only) and sums
// each metric's samples over their label sets: name → value.
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	b, err := httpGet(ctx, url, 16<<20)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(b))
}

// parseMetrics reads Prometheus text exposition: "name{labels} value".
// Comments and malformed lines are skipped.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				continue
			}
			rest = rest[j+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, sc.Err()
}

// logStats is what the log did between two scrapes.
type logStats struct {
	FsyncsPerS      float64 `json:"fsyncs_per_s"`
	EntriesPerFsync float64 `json:"entries_per_fsync"`
	AppendMeanMs    float64 `json:"append_mean_ms"` // write + fsync of one batch
	CommandsPerS    float64 `json:"commands_per_s"`
}

// logDelta computes logStats from scrapes before and after, seconds apart.
func logDelta(before, after map[string]float64, seconds float64) logStats {
	d := func(name string) float64 { return after[name] - before[name] }
	var st logStats
	fsyncs := d("chubby_log_batch_entries_count")
	if seconds > 0 {
		st.FsyncsPerS = fsyncs / seconds
		st.CommandsPerS = d("chubby_commands_total") / seconds
	}
	if fsyncs > 0 {
		st.EntriesPerFsync = d("chubby_log_batch_entries_sum") / fsyncs
	}
	if n := d("chubby_log_append_seconds_count"); n > 0 {
		st.AppendMeanMs = 1000 * d("chubby_log_append_seconds_sum") / n
	}
	return st
}
