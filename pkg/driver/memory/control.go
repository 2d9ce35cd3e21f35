package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The control endpoint lets a fault suite in another process drive a running cosi-driver-memory
// (its --control-address): set the faults, hold a call inside the driver, release it. It is a
// test hook: it has no authentication and must listen on loopback only.

// FaultSettings are the faults of a running driver, as the control endpoint takes them.
type FaultSettings struct {
	// Latency is added to every call.
	Latency time.Duration `json:"latency,omitempty"`
	// Faults are written as ParseFault reads them.
	Faults []string `json:"faults,omitempty"`
	// Seed, when not 0, restarts the random choices of the rated faults from it.
	Seed uint64 `json:"seed,omitempty"`
}

// PauseRequest arms a Pause.
type PauseRequest struct {
	Method string `json:"method"`
	After  bool   `json:"after"`
}

// Handler serves the control endpoint:
//
//	PUT  /faults  FaultSettings        replaces latency and faults
//	POST /pause   PauseRequest         arms a Pause
//	GET  /paused?timeout=DURATION      200 and the PausedCall once one is held; 204 at the timeout
//	POST /release                      releases the held call and disarms the Pause
func (f *Faults) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /faults", func(w http.ResponseWriter, r *http.Request) {
		var s FaultSettings
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var faults []Fault
		for _, spec := range s.Faults {
			fault, err := ParseFault(spec)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			faults = append(faults, fault)
		}
		if s.Seed != 0 {
			f.Seed(s.Seed)
		}
		f.Set(s.Latency, faults...)
	})
	mux.HandleFunc("POST /pause", func(w http.ResponseWriter, r *http.Request) {
		var p PauseRequest
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Method == "" {
			http.Error(w, fmt.Sprintf("want {\"method\": ..., \"after\": ...}: %v", err), http.StatusBadRequest)
			return
		}
		f.Pause(p.Method, p.After)
	})
	mux.HandleFunc("GET /paused", func(w http.ResponseWriter, r *http.Request) {
		timeout, err := time.ParseDuration(r.URL.Query().Get("timeout"))
		if err != nil {
			http.Error(w, "timeout: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		c, ok := f.WaitPaused(ctx)
		if !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	mux.HandleFunc("POST /release", func(http.ResponseWriter, *http.Request) { f.Release() })
	return mux
}

// Control is a client of a driver's control endpoint (Handler).
type Control struct {
	// Address is the endpoint's host:port.
	Address string
	// Client makes the requests; nil means http.DefaultClient.
	Client *http.Client
}

// SetFaults replaces the driver's latency and faults.
func (c Control) SetFaults(ctx context.Context, s FaultSettings) error {
	_, err := c.do(ctx, http.MethodPut, "/faults", s)
	return err
}

// Pause arms a Pause in the driver.
func (c Control) Pause(ctx context.Context, method string, after bool) error {
	_, err := c.do(ctx, http.MethodPost, "/pause", PauseRequest{Method: method, After: after})
	return err
}

// WaitPaused waits up to timeout for the armed Pause to hold a call.
func (c Control) WaitPaused(ctx context.Context, timeout time.Duration) (PausedCall, bool, error) {
	body, err := c.do(ctx, http.MethodGet, "/paused?timeout="+timeout.String(), nil)
	if err != nil || len(body) == 0 {
		return PausedCall{}, false, err
	}
	var p PausedCall
	if err := json.Unmarshal(body, &p); err != nil {
		return PausedCall{}, false, err
	}
	return p, true, nil
}

// Release releases the held call and disarms the Pause.
func (c Control) Release(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodPost, "/release", nil)
	return err
}

func (c Control) do(ctx context.Context, method, path string, in any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Address+path, body)
	if err != nil {
		return nil, err
	}
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= http.StatusBadRequest {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(out))
	}
	return out, nil
}
