package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
)

// Row is one figure of the summary: its median and range over the runs, and its target.
type Row struct {
	Name   string `json:"name"`
	Unit   string `json:"unit"`
	Stat   stat   `json:"stat"`
	Target string `json:"target,omitempty"`
	// Met is "yes", "NO" or "" (no target).
	Met string `json:"met,omitempty"`
}

func summarizeRuns(cfg Config, runs []RunResult) []Row {
	s := &summary{runs: runs}
	s.apiServerRows(cfg)
	for i, n := range cfg.Sizes {
		s.sizeRows(i, n)
	}
	s.processRows(cfg)
	return s.rows
}

// summary collects the rows of the report, one measurement over all runs each.
type summary struct {
	runs []RunResult
	rows []Row
}

// add adds the row name: get's value in each run, with the target ok checks on the median.
func (s *summary) add(name, unit string, get func(RunResult) float64, target string, ok func(median float64) bool) {
	values := make([]float64, len(s.runs))
	for i, r := range s.runs {
		values[i] = get(r)
	}
	row := Row{Name: name, Unit: unit, Stat: summarize(values), Target: target}
	if ok != nil {
		row.Met = map[bool]string{true: "yes", false: "NO"}[ok(row.Stat.Median)]
	}
	s.rows = append(s.rows, row)
}

// apiServerRows are the API server's raw ceiling and the single claims.
func (s *summary) apiServerRows(cfg Config) {
	add := s.add
	add("API server: creates, 1 writer", "obj/s", func(r RunResult) float64 { return r.RawCreate1 }, "", nil)
	add(
		fmt.Sprintf("API server: creates, %d writers", cfg.Writers),
		"obj/s",
		func(r RunResult) float64 { return r.RawCreate8 },
		"",
		nil,
	)
	add("API server: status updates, 1 writer", "obj/s", func(r RunResult) float64 { return r.RawStatus1 }, "", nil)
	add(
		fmt.Sprintf("API server: status updates, %d writers", cfg.Writers),
		"obj/s",
		func(r RunResult) float64 { return r.RawStatus8 },
		"",
		nil,
	)
	add(
		"single claim: create → Provisioned p50",
		"ms",
		func(r RunResult) float64 { return r.SingleProvisionP50 },
		"< 100",
		func(m float64) bool { return m < 100 },
	)
	add(
		"single claim: delete → gone p50",
		"ms",
		func(r RunResult) float64 { return r.SingleDeleteP50 },
		"< 200",
		func(m float64) bool { return m < 200 },
	)
}

// sizeRows are the throughput measurement with n claims and accesses, the i-th size.
func (s *summary) sizeRows(i, n int) {
	add, runs := s.add, s.runs
	size := func(f func(SizeResult) float64) func(RunResult) float64 {
		return func(r RunResult) float64 { return f(r.Sizes[i]) }
	}
	var claimTarget, accessTarget string
	var claimOK, accessOK func(float64) bool
	if n == 500 {
		raw := summarize(func() []float64 {
			v := make([]float64, len(runs))
			for j, r := range runs {
				v[j] = r.RawCreate8
			}
			return v
		}()).Median
		claimTarget = fmt.Sprintf("≥ 150 and ≥ raw/9 = %.0f", raw/9)
		claimOK = func(m float64) bool { return m >= 150 && m >= raw/9 }
		accessTarget, accessOK = "≥ 150", func(m float64) bool { return m >= 150 }
	}
	p := fmt.Sprintf("N=%d ", n)
	add(
		p+"claims/s (first create → last Provisioned)",
		"obj/s",
		size(func(s SizeResult) float64 { return s.ClaimsPerSec }),
		claimTarget,
		claimOK,
	)
	add(p+"claim latency p50", "ms", size(func(s SizeResult) float64 { return s.ClaimP50 }), "", nil)
	add(p+"claim latency p90", "ms", size(func(s SizeResult) float64 { return s.ClaimP90 }), "", nil)
	add(p+"claim latency p99", "ms", size(func(s SizeResult) float64 { return s.ClaimP99 }), "", nil)
	add(p+"COSI API requests per claim (all)", "requests",
		size(func(s SizeResult) float64 { return s.ClaimRequests }), "", nil)
	add(p+"COSI API reads per claim (GET, LIST, WATCH)", "requests",
		size(func(s SizeResult) float64 { return s.ClaimReads }), "", nil)
	add(p+"COSI API writes per claim (all resources)", "writes",
		size(func(s SizeResult) float64 { return s.ClaimWrites }), "", nil)
	add(p+"reconciles per claim (controller + sidecar)", "reconciles",
		size(func(s SizeResult) float64 { return s.ClaimReconciles }), "", nil)
	add(
		p+"DriverCreateBucket per claim",
		"calls",
		size(func(s SizeResult) float64 { return s.CreateRPCs }),
		"= 1",
		func(m float64) bool { return m == 1 },
	)
	add(
		p+"reconciles in 2 s idle after provisioning",
		"reconciles",
		size(func(s SizeResult) float64 { return s.IdleReconciles }),
		"= 0 (no hot loop)",
		func(m float64) bool { return m == 0 },
	)
	add(
		p+"accesses/s (first create → last Provisioned)",
		"obj/s",
		size(func(s SizeResult) float64 { return s.AccessesPerSec }),
		accessTarget,
		accessOK,
	)
	add(p+"access latency p50", "ms", size(func(s SizeResult) float64 { return s.AccessP50 }), "", nil)
	add(p+"access latency p90", "ms", size(func(s SizeResult) float64 { return s.AccessP90 }), "", nil)
	add(p+"access latency p99", "ms", size(func(s SizeResult) float64 { return s.AccessP99 }), "", nil)
	add(p+"COSI API requests per access (all)", "requests",
		size(func(s SizeResult) float64 { return s.AccessRequests }), "", nil)
	add(p+"COSI API reads per access (GET, LIST, WATCH)", "requests",
		size(func(s SizeResult) float64 { return s.AccessReads }), "", nil)
	add(p+"COSI API writes per access (all resources)", "writes",
		size(func(s SizeResult) float64 { return s.AccessWrites }), "≤ 6", func(m float64) bool { return m <= 6 })
	add(p+"reconciles per access (controller + sidecar)", "reconciles",
		size(func(s SizeResult) float64 { return s.AccessReconciles }), "≤ 3", func(m float64) bool { return m <= 3 })
	add(p+fmt.Sprintf("deferred reconciles per claim + access (until %v after the last is provisioned)", deferredWait),
		"reconciles",
		size(func(s SizeResult) float64 { return s.DeferredReconciles }), "", nil)
	add(p+"deferred COSI API requests per claim + access", "requests",
		size(func(s SizeResult) float64 { return s.DeferredRequests }), "", nil)
	add(
		p+"DriverGrantBucketAccess per access",
		"calls",
		size(func(s SizeResult) float64 { return s.GrantRPCs }),
		"= 1",
		func(m float64) bool { return m == 1 },
	)
	add(
		p+"Secrets with credentials",
		"secrets",
		size(func(s SizeResult) float64 { return float64(s.SecretsWithData) }),
		fmt.Sprintf("= %d", n),
		func(m float64) bool { return m == float64(n) },
	)
	add(
		p+"deletions/s (claims + accesses → gone)",
		"obj/s",
		size(func(s SizeResult) float64 { return s.DeletionsPerSec }),
		"",
		nil,
	)
	add(p+"delete all → driver empty", "s", size(func(s SizeResult) float64 { return s.DriverEmptyAfter }), "", nil)
	add(p+"409 conflicts (whole cycle)", "responses", size(func(s SizeResult) float64 { return s.Conflicts }), "", nil)
	add(p+"API server CPU per 1,000 claims", "CPU-s",
		size(func(s SizeResult) float64 { return s.APIServerCPU.Claims }), "", nil)
	add(p+"API server CPU per 1,000 accesses", "CPU-s",
		size(func(s SizeResult) float64 { return s.APIServerCPU.Accesses }), "", nil)
	add(p+"API server CPU per 1,000 deleted claim + access pairs", "CPU-s",
		size(func(s SizeResult) float64 { return s.APIServerCPU.Deletion }), "", nil)
	procs := []string{
		"total", "kube-apiserver", "etcd", "cosi-controller", "cosi-sidecar", "cosi-driver-memory", "cosi-bench",
	}
	for _, proc := range procs {
		add(p+"CPU while provisioning: "+proc, "cores", size(func(s SizeResult) float64 { return s.CPUCores[proc] }), "", nil)
	}
}

// processRows are the restarts and the controller's and sidecar's CPU and memory.
func (s *summary) processRows(cfg Config) {
	add := s.add
	if cfg.RestartSize > 0 {
		add(
			fmt.Sprintf("restarts mid-run (N=%d): DriverCreateBucket per claim", cfg.RestartSize),
			"calls",
			func(r RunResult) float64 { return r.RestartCreateRPCs },
			"= 1",
			func(m float64) bool { return m == 1 },
		)
		add(
			fmt.Sprintf("restarts mid-run (N=%d): DriverGrantBucketAccess per access", cfg.RestartSize),
			"calls",
			func(r RunResult) float64 { return r.RestartGrantRPCs },
			"= 1",
			func(m float64) bool { return m == 1 },
		)
	}
	if n := cfg.NamespaceDeletionSize; n > 0 {
		p := fmt.Sprintf("namespace of %d claims and accesses deleted: ", n)
		add(p+"delete all → driver empty", "s", func(r RunResult) float64 { return r.NamespaceDeletionSec }, "", nil)
		add(p+"LIST bucketaccesses per claim", "requests",
			func(r RunResult) float64 { return r.NamespaceDeletionAccessLists }, "", nil)
		add(p+"GET bucketaccesses per claim", "requests",
			func(r RunResult) float64 { return r.NamespaceDeletionAccessGets }, "", nil)
	}
	add("controller CPU, throughput phases", "s", func(r RunResult) float64 { return r.ControllerCPU }, "", nil)
	add("sidecar CPU, throughput phases", "s", func(r RunResult) float64 { return r.SidecarCPU }, "", nil)
	add("controller peak RSS, throughput phases", "MiB", func(r RunResult) float64 { return r.ControllerPeakRSS }, "", nil)
	add("sidecar peak RSS, throughput phases", "MiB", func(r RunResult) float64 { return r.SidecarPeakRSS }, "", nil)
	if cfg.RSSClaims > 0 {
		add(
			fmt.Sprintf("controller RSS with %d Buckets", cfg.RSSClaims),
			"MiB",
			func(r RunResult) float64 { return r.ControllerRSS },
			"< 150",
			func(m float64) bool { return m < 150 },
		)
		add(
			fmt.Sprintf("sidecar RSS with %d Buckets", cfg.RSSClaims),
			"MiB",
			func(r RunResult) float64 { return r.SidecarRSS },
			"< 150",
			func(m float64) bool { return m < 150 },
		)
	}
}

func printSummary(w io.Writer, cfg Config, rows []Row) {
	fmt.Fprintf(
		w,
		"\ncosi-bench: %d runs, %d writers, %d workers; median [min – max]\n\n",
		cfg.Runs,
		cfg.Writers,
		cfg.Workers,
	)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tMEDIAN\tRANGE\tUNIT\tTARGET\tMET")
	for _, r := range rows {
		fmt.Fprintf(
			tw,
			"%s\t%s\t%s – %s\t%s\t%s\t%s\n",
			r.Name,
			num(r.Stat.Median),
			num(r.Stat.Min),
			num(r.Stat.Max),
			r.Unit,
			r.Target,
			r.Met,
		)
	}
	tw.Flush()
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// breakdown is, for one N, the median over the runs of each request and reconcile count per object
// and phase.
type breakdown struct {
	N          int                     `json:"n"`
	Requests   map[string]phaseFigures `json:"requests"`
	Reconciles map[string]phaseFigures `json:"reconciles"`
}

func breakdowns(cfg Config, runs []RunResult) []breakdown {
	var out []breakdown
	for i, n := range cfg.Sizes {
		b := breakdown{N: n}
		b.Requests = medianFigures(runs, func(s SizeResult) map[string]phaseFigures { return s.Requests }, i)
		b.Reconciles = medianFigures(runs, func(s SizeResult) map[string]phaseFigures { return s.Reconciles }, i)
		out = append(out, b)
	}
	return out
}

// medianFigures is the median of each figure of get over the runs' i-th size (absent counts 0).
func medianFigures(runs []RunResult, get func(SizeResult) map[string]phaseFigures, i int) map[string]phaseFigures {
	keys := map[string]bool{}
	for _, r := range runs {
		for k := range get(r.Sizes[i]) {
			keys[k] = true
		}
	}
	out := map[string]phaseFigures{}
	for k := range keys {
		var c, a, d []float64
		for _, r := range runs {
			f := get(r.Sizes[i])[k]
			c, a, d = append(c, f.Claims), append(a, f.Accesses), append(d, f.Deletion)
		}
		out[k] = phaseFigures{Claims: summarize(c).Median, Accesses: summarize(a).Median, Deletion: summarize(d).Median}
	}
	return out
}

// printBreakdowns prints COSI's requests and reconciles per object and phase, medians over the runs.
func printBreakdowns(w io.Writer, bs []breakdown) {
	for _, b := range bs {
		fmt.Fprintf(w, "\nN=%d: COSI's API requests and reconciles per object (median over the runs)\n\n", b.N)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "REQUEST (verb resource[/subresource] code)\tPER CLAIM\tPER ACCESS\tPER DELETED PAIR\t")
		printFigures(tw, b.Requests)
		fmt.Fprintln(tw, "RECONCILES (component controller)\t\t\t\t")
		printFigures(tw, b.Reconciles)
		tw.Flush()
	}
}

func printFigures(tw io.Writer, figures map[string]phaseFigures) {
	var total phaseFigures
	for _, k := range slices.Sorted(maps.Keys(figures)) {
		f := figures[k]
		total.Claims += f.Claims
		total.Accesses += f.Accesses
		total.Deletion += f.Deletion
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", k, fig(f.Claims), fig(f.Accesses), fig(f.Deletion))
	}
	fmt.Fprintf(tw, "total\t%s\t%s\t%s\t\n", fig(total.Claims), fig(total.Accesses), fig(total.Deletion))
}

// fig prints a per-object figure with three decimals: 0.002 is one request in 500 objects.
func fig(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}
