package memory

import "github.com/prometheus/client_golang/prometheus"

// Collector exports how many buckets and accounts the driver holds, as the gauges
// cosi_memory_buckets and cosi_memory_accounts, so that a benchmark can see when the backend is
// empty.
func (d *Driver) Collector() prometheus.Collector { return collector{d} }

type collector struct{ d *Driver }

var (
	bucketsDesc  = prometheus.NewDesc("cosi_memory_buckets", "Buckets the memory driver holds.", nil, nil)
	accountsDesc = prometheus.NewDesc("cosi_memory_accounts", "Accounts the memory driver holds.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- bucketsDesc; ch <- accountsDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.d.mu.Lock()
	buckets, accounts := len(c.d.state.Buckets), len(c.d.state.Accounts)
	c.d.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(bucketsDesc, prometheus.GaugeValue, float64(buckets))
	ch <- prometheus.MustNewConstMetric(accountsDesc, prometheus.GaugeValue, float64(accounts))
}
