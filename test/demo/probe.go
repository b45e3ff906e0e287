package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/test/framework"
)

// getJSON fetches url and decodes its JSON body into v.
func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", url, err)
	}
	return nil
}

// simStats is the part of vllm-sim's /sim/stats the report shows.
type simStats struct {
	Requests     int64   `json:"requests"`
	Finished     int64   `json:"finished"`
	Aborted      int64   `json:"aborted"`
	Running      int     `json:"running"`
	Waiting      int     `json:"waiting"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
}

// workersURL is inferpick's /debug/workers on its metrics port.
func workersURL(metricsAddr string) string { return "http://" + metricsAddr + "/debug/workers" }

// errGaveUp marks an error after which polling is pointless.
var errGaveUp = errors.New("gave up")

// poll calls check until it reports done, returns an error wrapping
// errGaveUp, or deadline passes (test/framework's Poll, which checks every
// framework.PollInterval); it then returns check's last error, if any.
func poll(ctx context.Context, _, deadline time.Duration, check func(context.Context) (bool, error)) error {
	return framework.Poll(ctx, deadline, func() error {
		done, err := check(ctx)
		switch {
		case done:
			return nil
		case errors.Is(err, errGaveUp):
			return framework.Stop(err)
		case err != nil:
			return err
		default:
			return errors.New("not yet")
		}
	})
}

// waitSynced waits until inferpick's registry has synced with the API
// server and holds want workers that may be picked (parked ones, of unready
// pods, not counted).
func waitSynced(ctx context.Context, hc *http.Client, metricsAddr string, want int, exited <-chan struct{}, deadline time.Duration) error {
	var seen observe.WorkersView
	err := poll(ctx, 100*time.Millisecond, deadline, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("%w: inferpick exited", errGaveUp)
		default:
		}
		if err := getJSON(ctx, hc, workersURL(metricsAddr), &seen); err != nil {
			return false, err
		}
		return seen.Synced && seen.Live() == want, nil
	})
	if err != nil {
		return fmt.Errorf("inferpick not ready with %d workers (synced=%t, workers=%d): %w",
			want, seen.Synced, seen.Live(), err)
	}
	return nil
}
