// Package metricreg registers COSI's collectors on a registry once per process.
package metricreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns the collector that counts: c, or the identical one
// registered before (another manager of the same process, in tests), so that what is counted
// reaches the registry. Any other error is a programming error (a name registered with other
// labels or help) and panics, as prometheus.MustRegister does.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(err)
}
