package serving_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
)

// TestRelayFollowsNoRedirect (review of issue 40 item 2): RelayMetrics accepts only an http URL
// on loopback, "the relay is no way into anything else". The driver's metrics server answers
// with a redirect to an address that is not loopback (192.0.2.1, TEST-NET-1): the relay must not
// go there (pass the redirect on, or refuse it), never connect to it.
func TestRelayFollowsNoRedirect(t *testing.T) {
	driver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://192.0.2.1:9/latest/meta-data/", http.StatusFound)
	}))
	defer driver.Close()
	relay, err := serving.RelayMetrics(driver.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	relay.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, serving.DriverMetricsPath, nil))
	body, _ := io.ReadAll(rec.Body)
	if strings.Contains(string(body), "192.0.2.1") && rec.Code == http.StatusBadGateway {
		t.Errorf("the relay followed the driver's redirect off loopback: %d %s", rec.Code, body)
	}
}
