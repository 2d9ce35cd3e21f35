package sanity_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	"github.com/kube-cosi/cosi/pkg/sanity/mutants"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// mutationMemoryConfig is the reference driver the mutants break: two protocols (so that one is
// unsupported), multi-bucket access and ServiceAccount authentication, so that every case runs.
func mutationMemoryConfig() memory.Config {
	return memory.Config{
		Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3, cosiproto.ObjectProtocol_AZURE},
	}
}

// mutationSeed is the seed of the sequences in TestMutants (COSI_SANITY_SEED overrides it).
var mutationSeed = func() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("COSI_SANITY_SEED"), 10, 64); err == nil && v != 0 {
		return v
	}
	return 42
}()

// TestMutants is mutation testing of the suite: it runs every case, with a probe, against each
// mutant of the memory driver (package mutants), and fails when a must-catch mutant is not caught
// by its case with a message that names the bug. It prints the kill rate.
func TestMutants(t *testing.T) {
	all := mutants.All()
	var caught, mustCatch, mustCaught int
	var report []string
	for _, m := range all {
		t.Run(m.Name, func(t *testing.T) {
			cfg := mutationMemoryConfig()
			if m.Memory != nil {
				m.Memory(&cfg)
			}
			d := newMemory(t, cfg)
			var logs logBuffer
			inst := m.New(d, logs.logger())
			log := logs.logger()
			if inst.QuietLog {
				log = funcr.New(func(prefix, args string) { logs.write(prefix + " " + args) }, funcr.Options{})
			}
			scfg := memoryConfig(serve(t, inst.Server, log), d, &logs)
			if inst.Probe != nil {
				scfg.Probe = inst.Probe(scfg.Probe)
			}
			// The sequences' seed is fixed, so that the test is the same at every run; the figure
			// of catches over random seeds is docs/writing-a-driver.md's.
			scfg.Seed = mutationSeed
			results := run(t, scfg)
			failed := failedOrSkipped(results, sanity.Failed)
			r, ran := results[m.Case]
			says := func(msg string) bool {
				return slices.ContainsFunc(strings.Split(m.Says, "|"), func(s string) bool { return strings.Contains(msg, s) })
			}
			hit := ran && r.Status == sanity.Failed && says(r.Message)
			if strings.HasSuffix(m.Case, "/") { // a group: any of its cases
				for name, gr := range results {
					if strings.HasPrefix(name, m.Case) && gr.Status == sanity.Failed && says(gr.Message) {
						r, hit = gr, true
					}
				}
			}
			if hit {
				caught++
			}
			line := fmt.Sprintf("%-40s %-6s", m.Name, map[bool]string{true: "caught", false: "MISSED"}[hit])
			if m.MustCatch {
				mustCatch++
				if hit {
					mustCaught++
				} else {
					t.Errorf("must-catch mutant %q (%s) not caught by %q with a message containing %q; "+
						"case: %s %q; failed cases:\n%s", m.Name, m.Bug, m.Case, m.Says, r.Status, r.Message,
						strings.Join(failed, "\n"))
				}
			} else {
				line += " (blind spot: " + m.Blind + ")"
			}
			report = append(report, line)
			t.Logf("%s: %d cases failed:\n%s", m.Name, len(failed), strings.Join(failed, "\n"))
		})
	}
	t.Logf("mutants:\n%s", strings.Join(report, "\n"))
	t.Logf("kill rate: %d of %d mutants caught; must-catch: %d of %d", caught, len(all), mustCaught, mustCatch)
	fmt.Printf("cosi-sanity mutation test: %d of %d mutants caught; must-catch %d of %d (%.0f%%)\n",
		caught, len(all), mustCaught, mustCatch, 100*float64(mustCaught)/float64(max(mustCatch, 1)))
}
