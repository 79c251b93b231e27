// Package simulate replays a request trace against a simulated fleet of LLM
// engines under several autoscalers, on a virtual clock, and compares them: SLO
// attainment, TTFT quantiles, GPU-hours against a perfect-foresight oracle,
// scale events and reaction to load steps. It is the core of `lab simulate`
// and of lab/scoreboard. Runs are deterministic: the
// same inputs and Config.Seed give the same Report, byte for byte.
//
// # The fleet
//
// Every replica is a pod running one engine of lab/emulator (a vLLM V1-like
// continuous-batching scheduler) of one shape, the engine profile. A pod is
// created, loads its model for Config.ColdStart while Running but not Ready (its
// /metrics does not answer, its GPU is idle), then is Ready. A deleted pod
// (terminating, not Ready) takes no new request, finishes the ones it holds,
// queued and running, then is gone. Starting, Ready and draining pods all hold a
// GPU and count in GPU-hours. Scaling a fleet follows a Deployment's ReplicaSet:
// new pods start; on a scale-down starting pods go first, then the most recently
// Ready.
//
// A gateway routes each arrival to the Ready pod with the fewest outstanding
// requests (ties round-robin) and holds requests, in order, while no pod is Ready.
// TTFT and end-to-end latency are measured from the arrival at the gateway, so
// they include time held there and queued in an engine.
//
// # Metrics pipelines
//
// An HPA autoscaler is the Kubernetes 1.37 HPA controller modelled in lab/hpa,
// reconciling every sync period, fed the way it would be in a cluster:
//
//   - PathAdapter: the saturation adapter scrapes every Running pod every
//     ScrapeInterval (2 s; a starting pod's scrape fails), renders each Ready
//     engine's /metrics with the emulator's own Prometheus collector (vLLM V1
//     names), reads it through a MetricSource (today pkg/signals: the same
//     extraction, fusion and pooling as the adapter serves), and answers each
//     HPA request from the latest readings of the Ready pods, counting a pod
//     without a fresh one at the unknown saturation and scraping a Ready pod
//     never scraped on the spot.
//   - PathPrometheus: Prometheus scrapes every PrometheusScrapeInterval (15 s),
//     Ready and draining pods alike; the HPA's metrics adapter queries the latest
//     samples at each sync.
//   - PathKEDA: the same Prometheus, polled by KEDA every KEDAPollingInterval
//     (30 s); the HPA reads KEDA's cached value.
//   - GPU utilization (Resource metric nvidia.com/gpu, one GPU per pod): the
//     fraction of the previous Prometheus interval the engine spent in steps,
//     which is what NVML's utilization.gpu counts (time with at least one kernel
//     running), sampled at every Prometheus scrape. This is kinder to that
//     autoscaler than a real exporter, which samples a shorter window at its own
//     interval.
//
// Every periodic clock starts at a phase drawn from the seed, the same for all
// policies. Gauge readings only matter at the scrape just before a read, so scrapes
// that nothing reads are skipped (Config.ScrapeEveryTick turns this off for a
// MetricSource that keeps history); a test checks that this changes no result.
//
// # Autoscalers
//
// Run always includes the oracle (see oracle.go for its definition) and a static
// fleet sized for the oracle's peak, then the given autoscalers: the built-ins
// (BuiltinAutoscalers: GPU utilization, KEDA's queue trigger without and with
// its cache, KV-cache usage, llm_saturation with target Value 1 and
// llm_demand_replicas with AverageValue 1, all with RecommendedBehavior) and any
// user HPA (hpa.Parse), each an Autoscaler with the path its metrics take and,
// optionally, its own MetricSource (a catalog of its own: set points, terms that
// see ahead). A new signal is a new MetricSource. (A "policy" is an entry of the
// adapter's metric catalog, pkg/policy.)
//
// Every fleet starts with the oracle's initial replicas Ready; GPU-hours are
// counted over the traffic window after the warm-up ([Workload.ScoreFrom,
// Workload.Duration]), and only the requests arriving in it are scored;
// requests may finish up to Config.DrainLimit later.
package simulate
