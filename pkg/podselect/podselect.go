// Package podselect decides which pods form a pool and which are scraped, from
// client-go informer caches of pods and HorizontalPodAutoscalers. A pool is the
// pods of one namespace matched by a label selector; the scrape set is every pod
// matched by a selector that a request asked about recently or that a
// HorizontalPodAutoscaler names in an External metric the adapter serves. It
// hands the provider per-pod facts (Member), and the scraper its targets, built
// by the same rules.
package podselect

import (
	"container/list"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/hpaindex"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

// The pod annotations that override the scrape defaults, as understood by
// Prometheus's kubernetes_sd example configuration.
const (
	AnnotationPort   = "prometheus.io/port"
	AnnotationPath   = "prometheus.io/path"
	AnnotationScheme = "prometheus.io/scheme"
)

// PodLister reads pods from a cache. Errors name a namespace that is not watched.
type PodLister interface {
	// List returns the pods of namespace matched by selector.
	List(namespace string, selector labels.Selector) ([]*corev1.Pod, error)
	// Get returns one pod, or a NotFound error.
	Get(namespace, name string) (*corev1.Pod, error)
	// Generation changes whenever a pod of namespace changes in the cache.
	Generation(namespace string) uint64
	// HasSynced reports whether the cache holds every pod.
	HasSynced() bool
}

// Options configure a Selection.
type Options struct {
	// Port, Path and Scheme build the /metrics URL of a pod without annotations.
	Port   int
	Path   string
	Scheme string
	// IdleTimeout is how long a selector stays in the scrape set after the last
	// request that used it.
	IdleTimeout time.Duration
	// Serves reports whether the adapter serves an External metric of that
	// (lower-case) name: an HPA with such a metric puts its selector's pods in
	// the scrape set.
	Serves func(metric string) bool
	// Gateway, if set, returns the gateway pods a served metric reads (nil for
	// none): an HPA with such a metric puts them in the scrape set too, at the
	// override's port and path.
	Gateway func(metric string) *Gateway
	// HPAs is the adapter's index of HorizontalPodAutoscalers, shared with
	// the advisor; nil: the Selection makes its own (register HPAHandler).
	HPAs *hpaindex.Index
	// MaxRequestSelectors bounds the selectors remembered from requests alone
	// (not any HPA's External metric selector: a person's kubectl, an HPA of
	// type Pods); past it the least recently asked of the namespace holding the
	// most is forgotten first. 0 means DefaultMaxRequestSelectors.
	MaxRequestSelectors int
	// ScrapeHostNetwork allows scraping pods with spec.hostNetwork: their IP is
	// the node's, so an annotation could point the adapter at any port and path
	// of the node. Off, such a pod is counted but cannot be scraped (unknown).
	ScrapeHostNetwork bool
}

// DefaultMaxRequestSelectors is the default of Options.MaxRequestSelectors.
const DefaultMaxRequestSelectors = 1000

// MaxSelectorBytes is the longest selector (in its canonical form) a request
// may leave in the scrape set or the member cache: a longer one is answered,
// from a scrape on the spot, but neither remembered nor cached. HPA selectors
// are operator objects and not bounded here.
const MaxSelectorBytes = 4096

// Member is one pod matched by a pool's selector, with the facts the provider
// needs. Members are shared between callers: do not modify them.
type Member struct {
	// Pod and UID identify the pod; scrape results are keyed by UID.
	Pod types.NamespacedName
	UID types.UID
	// Counted reports whether the pod counts towards the pool: Running, Ready
	// and not terminating, the pods the HPA's replica calculation also counts.
	Counted bool
	// Labels are the pod's labels (shared with the informer cache: read only),
	// for a policy's role restriction.
	Labels map[string]string
	// Target is where the pod is scraped; valid only when TargetErr is nil.
	Target scrape.Target
	// TargetErr says why the pod cannot be scraped (no IP yet, a bad annotation).
	TargetErr error
	// Starting reports a pod that is not Ready yet and not terminating
	// (Pending, or Running and not Ready: pulling its image, loading its
	// model), created at Created.
	Starting bool
	Created  time.Time
}

// Selection tracks the selectors of interest and turns them into pool members
// and scrape targets. It is safe for concurrent use.
type Selection struct {
	opts  Options
	pods  PodLister
	clock clock.PassiveClock

	mu sync.Mutex
	// asked holds the selectors requests asked about that no HPA's External
	// metric explains, most recently asked first (*interest values).
	asked     map[string]*list.Element
	lru       *list.List
	askedByNS map[string]int // the interests in asked, by namespace
	lastSweep time.Time

	// hpas is the index of HPAs, kept from informer events so that neither
	// the scrape set nor a request lists HPAs.
	hpas  *hpaindex.Index
	hpaMu sync.RWMutex
	// hpaKeys counts, per interest key, the HPA metrics on a served metric with
	// that namespace and selector: such a selector is in the scrape set anyway.
	hpaKeys map[string]int

	// members caches the members of each (namespace, selector) until a pod of
	// the namespace changes: listing a namespace index, matching every pod's
	// labels and building its URL was most of the cost of an HPA request
	// (BenchmarkGetExternalMetric1000Pods).
	memberMu sync.Mutex
	members  map[string]memberList
	// cachedMembers is the sum of the cached lists' lengths.
	cachedMembers int
}

// maxCachedPools and maxCachedMembers bound the member cache: 4,096 lists of
// selectors of at most MaxSelectorBytes and 100,000 members in all (about 20 MB
// at the most).
const (
	maxCachedPools   = 4096
	maxCachedMembers = 100000
)

type memberList struct {
	namespace  string
	generation uint64
	members    []Member
}

type interest struct {
	key       string
	namespace string
	selector  labels.Selector
	override  Override
	lastAsked time.Time
}

// Override replaces, for the pods of one selector, the port and path their
// annotations (else the defaults) give: a policy's gateway input may name the
// endpoint picker's metrics port. Zero fields keep the pod's.
type Override struct {
	Port int
	Path string
	// BearerTokenFile, when set, is sent as the pods' bearer token
	// (scrape.Target.BearerTokenFile), but only to pods of Namespace running
	// as ServiceAccount: both must then be set, and a pod elsewhere or under
	// another account is not scraped (its labels, which a tenant may copy,
	// never earn it the token).
	BearerTokenFile string
	// ServiceAccount, when set, is the only ServiceAccount the pods may run
	// as; others are not scraped.
	ServiceAccount string
	// Namespace is the only namespace whose pods get BearerTokenFile.
	Namespace string
}

// key renders a non-zero override for interest keys.
func (o Override) key() string {
	if o == (Override{}) {
		return ""
	}
	return "\x00" + strconv.Itoa(o.Port) + "\x00" + o.Path + "\x00" + o.BearerTokenFile + "\x00" + o.ServiceAccount + "\x00" + o.Namespace
}

// trusts reports why the override's pods may not include p, "" when they may:
// a pod running as another ServiceAccount than the override's, and, with a
// bearer token, a pod outside the override's namespace or an override
// without both (the token goes to nothing a tenant can forge).
func (o Override) trusts(p *corev1.Pod) string {
	if o.ServiceAccount != "" && p.Spec.ServiceAccountName != o.ServiceAccount {
		return fmt.Sprintf("runs as ServiceAccount %q, not the gateway's %q: not scraped as the gateway", excerpt.String(p.Spec.ServiceAccountName, 64), o.ServiceAccount)
	}
	if o.BearerTokenFile == "" {
		return ""
	}
	if o.ServiceAccount == "" || o.Namespace == "" {
		return "the gateway input's token needs its namespace and ServiceAccount: not scraped"
	}
	if p.Namespace != o.Namespace {
		return fmt.Sprintf("is not in the gateway's namespace %q: the token is not sent", o.Namespace)
	}
	return ""
}

// Gateway is where a served metric's gateway pods are: a selector in a
// namespace (empty: the namespace of the HPA or request), scraped with an
// override.
type Gateway struct {
	Namespace string
	Selector  labels.Selector
	Override  Override
}

// New returns a Selection over the pods of pods. Register the HPA index's
// handler (HPAHandler) with the informers before they start so that HPAs
// declare interest.
func New(opts Options, pods PodLister, clk clock.PassiveClock) *Selection {
	if opts.MaxRequestSelectors <= 0 {
		opts.MaxRequestSelectors = DefaultMaxRequestSelectors
	}
	hpas := opts.HPAs
	if hpas == nil {
		hpas = hpaindex.New()
	}
	s := &Selection{
		opts: opts, pods: pods, clock: clk,
		asked:     map[string]*list.Element{},
		lru:       list.New(),
		askedByNS: map[string]int{},
		hpas:      hpas,
		hpaKeys:   map[string]int{},
		members:   map[string]memberList{},
	}
	hpas.Subscribe(s.hpaChanged)
	return s
}

// interestKey keys request state by (namespace, canonical selector), so two
// namespaces never share an entry. labels.Selector.String sorts requirements.
func interestKey(namespace string, selector labels.Selector) string {
	return namespace + "\x00" + selector.String()
}

// poolKey is the scrape pool key (scrape.Target.Pool) of a selector's pods: a
// short hash of its canonical form, so that a long selector is not copied
// into every target and the scraper's queues.
func poolKey(selector labels.Selector) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(selector.String()))
	return strconv.FormatUint(h.Sum64(), 36)
}

// Synced reports whether the pod cache is filled: before that, "no pods match"
// would be a guess.
func (s *Selection) Synced() bool { return s.pods.HasSynced() }

// RecordInterest records that a request asked about selector in namespace: its
// pods join the scrape set for IdleTimeout. A selector that an HPA's External
// metric on a served metric already puts in the scrape set is not stored
// again, one longer than MaxSelectorBytes is not stored at all, and past
// MaxRequestSelectors the least recently asked of the namespace holding the
// most is forgotten. Interests idle for longer than IdleTimeout are forgotten
// here, at most once per IdleTimeout.
func (s *Selection) RecordInterest(namespace string, selector labels.Selector) {
	s.RecordInterestWith(namespace, selector, Override{})
}

// RecordInterestWith is RecordInterest for pods scraped with an override (a
// gateway input's port and path).
func (s *Selection) RecordInterestWith(namespace string, selector labels.Selector, ov Override) {
	sel := selector.String()
	if len(sel) > MaxSelectorBytes {
		klog.V(4).InfoS("Selector too long to remember; its pods are scraped on demand only", "namespace", namespace, "selectorBytes", len(sel))
		return
	}
	key := namespace + "\x00" + sel + ov.key()
	s.hpaMu.RLock()
	byHPA := s.hpaKeys[key] > 0
	s.hpaMu.RUnlock()
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.asked[key]; ok {
		el.Value.(*interest).lastAsked = now
		s.lru.MoveToFront(el)
		return
	}
	if byHPA {
		return
	}
	s.asked[key] = s.lru.PushFront(&interest{key: key, namespace: namespace, selector: selector, override: ov, lastAsked: now})
	s.askedByNS[namespace]++
	for s.lru.Len() > s.opts.MaxRequestSelectors {
		oldest := s.forgetFairLocked()
		klog.V(4).InfoS("Forgot the least recently asked request selector of the namespace holding the most", "namespace", oldest.namespace, "limit", s.opts.MaxRequestSelectors)
	}
	if now.Sub(s.lastSweep) < s.opts.IdleTimeout {
		return
	}
	s.lastSweep = now
	for el := s.lru.Back(); el != nil; el = s.lru.Back() {
		in := el.Value.(*interest)
		if !s.idle(in, now) {
			break
		}
		s.forgetLocked(el)
	}
}

// forgetLocked forgets one request interest (s.mu held).
func (s *Selection) forgetLocked(el *list.Element) *interest {
	in := s.lru.Remove(el).(*interest)
	delete(s.asked, in.key)
	if s.askedByNS[in.namespace]--; s.askedByNS[in.namespace] <= 0 {
		delete(s.askedByNS, in.namespace)
	}
	return in
}

// forgetFairLocked forgets the least recently asked interest of the namespace
// holding the most (s.mu held): one namespace's flood of selectors (a
// person's kubectl, a script) forgets its own first, never the selectors an
// HPA of type Pods in a namespace holding fewer keeps asking about
// (TestInterestsEvictTheNamespaceHoldingMost).
func (s *Selection) forgetFairLocked() *interest {
	most, n := "", 0
	for ns, c := range s.askedByNS {
		if c > n || (c == n && ns < most) {
			most, n = ns, c
		}
	}
	for el := s.lru.Back(); el != nil; el = el.Prev() {
		if el.Value.(*interest).namespace == most {
			return s.forgetLocked(el)
		}
	}
	return s.forgetLocked(s.lru.Back()) // not reached: the counts follow the list
}

func (s *Selection) idle(in *interest, now time.Time) bool {
	return now.Sub(in.lastAsked) > s.opts.IdleTimeout
}

// Members returns the members of the pool of namespace matched by selector, in
// no particular order. The slice is shared: callers must not modify it.
func (s *Selection) Members(namespace string, selector labels.Selector) ([]Member, error) {
	return s.MembersWith(namespace, selector, Override{})
}

// MembersWith is Members for pods scraped with an override.
func (s *Selection) MembersWith(namespace string, selector labels.Selector, ov Override) ([]Member, error) {
	key := interestKey(namespace, selector) + ov.key()
	gen := s.pods.Generation(namespace)
	s.memberMu.Lock()
	m, ok := s.members[key]
	s.memberMu.Unlock()
	if ok && m.generation == gen {
		return m.members, nil
	}
	pods, err := s.pods.List(namespace, selector)
	if err != nil {
		return nil, err
	}
	pool := poolKey(selector)
	members := make([]Member, len(pods))
	for i, p := range pods {
		members[i] = s.memberWith(p, ov)
		members[i].Target.Pool = pool
	}
	if len(key) > MaxSelectorBytes+len(namespace)+1 {
		return members, nil
	}
	s.memberMu.Lock()
	if old, ok := s.members[key]; ok {
		s.cachedMembers -= len(old.members)
		delete(s.members, key)
	}
	if len(members) <= maxCachedMembers {
		// The cache is a cache: past its bounds the namespace holding the
		// most lets all its lists go, rather than keep the pools of
		// selectors nobody asks about any more; so one namespace's flood of
		// selectors costs the lists of no namespace holding fewer.
		for len(s.members) > 0 && len(s.members) >= maxCachedPools {
			s.dropLargestLocked(func(l memberList) int { return 1 })
		}
		for len(s.members) > 0 && s.cachedMembers+len(members) > maxCachedMembers {
			s.dropLargestLocked(func(l memberList) int { return len(l.members) })
		}
		s.members[key] = memberList{namespace: namespace, generation: gen, members: members}
		s.cachedMembers += len(members)
	}
	s.memberMu.Unlock()
	return members, nil
}

// dropLargestLocked lets go of every cached list of the namespace whose lists
// weigh the most (memberMu held).
func (s *Selection) dropLargestLocked(weight func(memberList) int) {
	byNS := map[string]int{}
	largest := ""
	for _, l := range s.members {
		byNS[l.namespace] += weight(l)
		if byNS[l.namespace] > byNS[largest] {
			largest = l.namespace
		}
	}
	for k, l := range s.members {
		if l.namespace == largest {
			s.cachedMembers -= len(l.members)
			delete(s.members, k)
		}
	}
}

// Member returns the member for one pod by name; found is false when the pod
// does not exist.
func (s *Selection) Member(namespace, name string) (m Member, found bool, err error) {
	p, err := s.pods.Get(namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return Member{}, false, nil
		}
		return Member{}, false, err
	}
	return s.member(p), true, nil
}

func (s *Selection) member(p *corev1.Pod) Member { return s.memberWith(p, Override{}) }

func (s *Selection) memberWith(p *corev1.Pod, ov Override) Member {
	m := Member{Pod: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, UID: p.UID, Counted: Counted(p), Labels: p.Labels,
		Created: p.CreationTimestamp.Time}
	m.Starting = !m.Counted && p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning)
	m.Target, m.TargetErr = s.targetWith(p, ov)
	return m
}

// Targets returns the scrape targets: every scrapeable pod matched by a
// selector asked about within the idle timeout or named by an HPA on a served
// metric, each once.
func (s *Selection) Targets() []scrape.Target {
	seen := map[types.UID]struct{}{}
	var out []scrape.Target
	for _, in := range s.interests() {
		pool := poolKey(in.selector)
		pods, err := s.pods.List(in.namespace, in.selector)
		if err != nil {
			klog.V(2).InfoS("Listing pods for the scrape set", "namespace", in.namespace, "selector", in.selector.String(), "err", err)
			continue
		}
		for _, p := range pods {
			if !Scrapeable(p) {
				continue
			}
			if _, dup := seen[p.UID]; dup {
				continue
			}
			t, err := s.targetWith(p, in.override)
			if err != nil {
				klog.V(2).InfoS("Pod cannot be scraped", "pod", klog.KObj(p), "err", err)
				continue
			}
			seen[p.UID] = struct{}{}
			t.Pool = pool
			out = append(out, t)
		}
	}
	return out
}

// interests returns the live request interests and the selectors of HPAs on
// served metrics.
func (s *Selection) interests() []interest {
	now := s.clock.Now()
	var out []interest
	s.mu.Lock()
	for el := s.lru.Front(); el != nil; el = el.Next() {
		in := el.Value.(*interest)
		if s.idle(in, now) {
			break // the rest were asked even earlier
		}
		out = append(out, *in)
	}
	s.mu.Unlock()
	s.hpas.Range(func(h *hpaindex.HPA) bool {
		ns := h.Key.Namespace
		for _, m := range h.External {
			if !s.opts.Serves(m.Name) {
				continue
			}
			out = append(out, interest{namespace: ns, selector: m.Selector})
			if s.opts.Gateway == nil {
				continue
			}
			if g := s.opts.Gateway(m.Name); g != nil {
				gns := g.Namespace
				if gns == "" {
					gns = ns
				}
				out = append(out, interest{namespace: gns, selector: g.Selector, override: g.Override})
			}
		}
		return true
	})
	return out
}

// HPAsFor returns the names, sorted, of the HPAs of namespace with an External
// metric named metric (case-insensitively) whose selector equals selector: the
// HPAs a request for (namespace, metric, selector) answers.
func (s *Selection) HPAsFor(namespace, metric string, selector labels.Selector) []string {
	hpas := s.hpas.For(namespace, metric, selector.String())
	if len(hpas) == 0 {
		return nil
	}
	out := make([]string, len(hpas))
	for i, h := range hpas {
		out[i] = h.Key.Name
	}
	return out
}

// HPAHandler returns the event handler that keeps the Selection's index of
// HorizontalPodAutoscalers (Options.HPAs); see Informers.AddHPAHandler.
// Register it once per index: the adapter registers its index's handler
// itself.
func (s *Selection) HPAHandler() cache.ResourceEventHandler { return s.hpas.Handler() }

// hpaChanged keeps hpaKeys in step with the index: the HPA metrics on a served
// metric, counted per (namespace, selector).
func (s *Selection) hpaChanged(old, cur *hpaindex.HPA) {
	s.hpaMu.Lock()
	defer s.hpaMu.Unlock()
	if old != nil {
		for _, m := range old.External {
			if s.opts.Serves(m.Name) {
				k := old.Key.Namespace + "\x00" + m.Key
				if s.hpaKeys[k]--; s.hpaKeys[k] <= 0 {
					delete(s.hpaKeys, k)
				}
			}
		}
	}
	if cur != nil {
		for _, m := range cur.External {
			if s.opts.Serves(m.Name) {
				s.hpaKeys[cur.Key.Namespace+"\x00"+m.Key]++
			}
		}
	}
}

// Scrapeable reports whether a pod can be scraped: Running, with an IP, not
// terminating.
func Scrapeable(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil
}

// Counted reports whether a pod counts towards a pool: Running, Ready and not
// terminating, the pods the HPA's replica calculation also counts as ready.
func Counted(p *corev1.Pod) bool {
	if !Scrapeable(p) {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// targetWith builds a pod's scrape target from its IP and the prometheus.io
// annotations, else the configured defaults. The URL never comes from a
// request. Errors name the pod and the problem, quoting at most a short
// excerpt of a bad port or scheme and never the path (it may hold a query
// with a token): their text reaches API callers through the pool's message.
// A non-zero override replaces the port and path (a gateway input's).
func (s *Selection) targetWith(p *corev1.Pod, ov Override) (scrape.Target, error) {
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	if p.Status.PodIP == "" {
		return scrape.Target{}, fmt.Errorf("pod %s has no IP yet", key)
	}
	if why := ov.trusts(p); why != "" {
		return scrape.Target{}, fmt.Errorf("pod %s %s", key, why)
	}
	if p.Spec.HostNetwork && !s.opts.ScrapeHostNetwork {
		// Its IP is the node's: an annotation could aim the adapter at any port
		// of the node (the kubelet, a node-local agent).
		return scrape.Target{}, fmt.Errorf("pod %s uses the host network and is not scraped (--scrape-host-network-pods allows it)", key)
	}
	port, path, scheme := s.opts.Port, s.opts.Path, s.opts.Scheme
	if v, ok := p.Annotations[AnnotationPort]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q is not a port number", key, AnnotationPort, excerpt.String(v, 32))
		}
		port = n
	}
	if v, ok := p.Annotations[AnnotationPath]; ok {
		if !strings.HasPrefix(v, "/") {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s must be an absolute path, starting with /", key, AnnotationPath)
		}
		path = v
	}
	if v, ok := p.Annotations[AnnotationScheme]; ok {
		if v != "http" && v != "https" {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q must be http or https", key, AnnotationScheme, excerpt.String(v, 16))
		}
		scheme = v
	}
	if ov.Port != 0 {
		port = ov.Port
	}
	if ov.Path != "" {
		path = ov.Path
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))}
	// Path may carry a query (e.g. /metrics?format=text); keep it verbatim,
	// but never let a scrape load a model (noAutoload).
	return scrape.Target{Pod: key, UID: p.UID, URL: u.String() + noAutoload(path), BearerTokenFile: ov.BearerTokenFile}, nil
}

// noAutoload returns path with autoload=false added to its query when the
// query names a model: llama.cpp's server in router mode (llama-server with
// --models-dir or --models-preset) loads the model a GET /metrics?model=X
// names when it is not loaded (--models-autoload, on by default;
// ggml-org/llama.cpp#23096, #19346), so a scrape every 2 s would load, and
// keep awake, a model its operator unloaded or let sleep. With
// autoload=false the router does not load it; the scrape then fails, and the
// pod counts as unknown, not as idle capacity. Any other path is returned
// as it is.
func noAutoload(path string) string {
	p, query, ok := strings.Cut(path, "?")
	if !ok {
		return path
	}
	q, err := url.ParseQuery(query)
	if err != nil || !q.Has("model") || q.Get("autoload") == "false" {
		return path
	}
	q.Set("autoload", "false")
	return p + "?" + q.Encode()
}
