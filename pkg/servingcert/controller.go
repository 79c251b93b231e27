// Package servingcert lets the adapter manage its own serving certificate for
// the aggregation layer, with no extra software: a CA and a serving key pair
// kept in one Secret of the adapter's namespace, rotated before they expire,
// served to k8s.io/apiserver without a restart, and the CA bundle published
// into the adapter's APIServices' spec.caBundle so that kube-apiserver verifies
// the adapter (insecureSkipTLSVerify false).
//
// Several replicas run it at once. They share the Secret through optimistic
// concurrency (a Create that meets AlreadyExists, or an Update whose
// resourceVersion is stale, re-reads and re-decides), and each watches the one
// Secret and reloads when another replica rotated it.
//
// Rotation never leaves a verifier without the CA it needs: a new CA joins the
// bundle next to the old one, signs the serving certificate only once it has
// been published for a grace period, and the old CA leaves the bundle only a
// grace period after the serving certificate it signed was replaced.
package servingcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/pkg/apiservice"
)

// Defaults and limits of the certificates' validity.
const (
	// DefaultServingValidity is the serving certificate's validity, 365 days;
	// it is renewed when less than a third remains (about four months before).
	DefaultServingValidity = 365 * 24 * time.Hour
	// DefaultCAValidity is the CA's validity, 3650 days; it is replaced when
	// less than a third remains (about 3.3 years before it expires), which
	// leaves room for every serving certificate it signed.
	DefaultCAValidity = 10 * DefaultServingValidity
	// MinServingValidity is the shortest serving validity accepted (short ones
	// are for tests of rotation).
	MinServingValidity = time.Minute
	// maxGrace bounds the propagation grace: a CA joins the bundle this long
	// before it signs, and leaves it this long after it stopped signing. A
	// Secret update reaches the other replica's watch, and an APIService update
	// the aggregator's, in seconds; ten minutes covers a watch being re-established.
	maxGrace = 10 * time.Minute
	// maxInterval bounds the period of the controller's checks (one GET of the
	// Secret and one per APIService).
	maxInterval = time.Minute
)

// ManagedByLabel marks the Secrets this package created; a Secret without it
// (value ManagedByValue) is never written.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "saturation-adapter"
)

// Options are the flags of the managed serving certificate.
type Options struct {
	// SecretName enables the mode: the Secret, in the adapter's namespace,
	// that holds the CA and the serving key pair. Empty disables it.
	SecretName string
	// ServingValidity is the validity of each serving certificate.
	ServingValidity time.Duration
	// CAValidity is the validity of each CA; at least 3 × ServingValidity.
	CAValidity time.Duration
}

// NewOptions returns the defaults: disabled, 365-day serving certificates and
// 3650-day CAs.
func NewOptions() *Options {
	return &Options{ServingValidity: DefaultServingValidity, CAValidity: DefaultCAValidity}
}

// AddFlags adds --tls-managed-secret, --tls-managed-serving-validity and
// --tls-managed-ca-validity.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "tls-managed-secret", o.SecretName,
		"Manage the serving certificate in this Secret of --adapter-namespace: a CA and a serving key pair for <--adapter-service>.<namespace>.svc, created on first start, rotated before expiry, reloaded without a restart, and the CA written to the --apiservices' spec.caBundle (insecureSkipTLSVerify false). Empty: use --tls-cert-file or --cert-dir.")
	fs.DurationVar(&o.ServingValidity, "tls-managed-serving-validity", o.ServingValidity,
		"Validity of each managed serving certificate; it is renewed when less than a third remains. At least 1m.")
	fs.DurationVar(&o.CAValidity, "tls-managed-ca-validity", o.CAValidity,
		"Validity of each managed CA, at least 3 times --tls-managed-serving-validity; a new CA takes over when less than a third remains, with both in the caBundle meanwhile.")
}

// Enabled reports whether --tls-managed-secret is set.
func (o *Options) Enabled() bool { return o.SecretName != "" }

// Validate returns one error per bad flag, naming it and its value. id are
// the adapter's identity options (namespace, Service, APIServices);
// tlsCertFile is the value of --tls-cert-file, which excludes this mode.
func (o *Options) Validate(id *apiservice.Options, tlsCertFile string) []error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(o.SecretName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--tls-managed-secret=%s: %s", o.SecretName, strings.Join(msgs, "; ")))
	}
	if o.ServingValidity < MinServingValidity {
		errs = append(errs, fmt.Errorf("--tls-managed-serving-validity=%s: must be at least %s", o.ServingValidity, MinServingValidity))
	}
	if o.CAValidity < renewDivisor*o.ServingValidity {
		errs = append(errs, fmt.Errorf("--tls-managed-ca-validity=%s: must be at least %d × --tls-managed-serving-validity (%s), so that the CA outlives what it signs",
			o.CAValidity, renewDivisor, renewDivisor*o.ServingValidity))
	}
	if id.Namespace == "" {
		errs = append(errs, fmt.Errorf("--tls-managed-secret=%s needs the adapter's namespace: set --adapter-namespace or POD_NAMESPACE", o.SecretName))
	}
	if tlsCertFile != "" {
		errs = append(errs, fmt.Errorf("--tls-managed-secret=%s and --tls-cert-file=%s: choose one", o.SecretName, tlsCertFile))
	}
	return errs
}

// Config returns the controller's configuration for the adapter identified by id.
func (o *Options) Config(id *apiservice.Options) Config {
	return Config{Namespace: id.Namespace, SecretName: o.SecretName, DNSNames: DNSNames(id.Self()),
		ServingValidity: o.ServingValidity, CAValidity: o.CAValidity}
}

// DNSNames returns the names a Service's serving certificate must carry:
// <name>.<namespace>.svc, which kube-apiserver's aggregator verifies
// (ServerName in k8s.io/kube-aggregator pkg/controllers/status/remote/
// remote_available_controller.go BuildTransportConfig), and the same under
// the default cluster domain, cluster.local.
func DNSNames(s apiservice.Service) []string {
	base := s.Name + "." + s.Namespace + ".svc"
	return []string{base, base + ".cluster.local"}
}

// Config configures a Controller.
type Config struct {
	// Namespace and SecretName locate the Secret.
	Namespace  string
	SecretName string
	// DNSNames are the serving certificate's subject alternative names; the
	// first is also its common name.
	DNSNames []string
	// ServingValidity and CAValidity are the certificates' validities.
	ServingValidity time.Duration
	CAValidity      time.Duration
}

// Publisher writes the CA bundle where the aggregator reads it;
// *apiservice.Publisher writes the APIServices' spec.caBundle. Publish returns
// nil only when every verifier now has bundle.
type Publisher interface {
	Publish(ctx context.Context, bundle []byte) error
}

// Controller manages the Secret and serves its serving certificate. It is a
// dynamiccertificates.CertKeyContentProvider and ControllerRunner: set it as
// the generic API server's SecureServingInfo.Cert and k8s.io/apiserver runs it
// (RunOnce, then Run in a goroutine) when it starts serving, and reloads the
// TLS configuration whenever it notifies its listeners
// (k8s.io/apiserver pkg/server/secure_serving.go tlsConfig,
// pkg/server/dynamiccertificates/tlsconfig.go DynamicServingCertificateController).
// Until the first successful sync it has no content and TLS handshakes fail.
type Controller struct {
	cfg       Config
	policy    policy
	interval  time.Duration
	client    kubernetes.Interface
	secrets   corev1client.SecretInterface
	publisher Publisher
	clock     clock.WithTicker
	trigger   chan struct{}

	mu        sync.RWMutex
	cert, key []byte
	bundle    []byte
	listeners []dynamiccertificates.Listener
}

var (
	_ dynamiccertificates.CertKeyContentProvider = (*Controller)(nil)
	_ dynamiccertificates.ControllerRunner       = (*Controller)(nil)
)

// New returns a Controller. publisher may be nil (the CA bundle is then only
// in the Secret, for whoever copies it). It errors on an incomplete cfg.
func New(cfg Config, client kubernetes.Interface, publisher Publisher, clk clock.WithTicker) (*Controller, error) {
	switch {
	case cfg.Namespace == "" || cfg.SecretName == "":
		return nil, fmt.Errorf("managed serving certificate: no Secret namespace/name (%q/%q)", cfg.Namespace, cfg.SecretName)
	case len(cfg.DNSNames) == 0:
		return nil, errors.New("managed serving certificate: no DNS names")
	case cfg.ServingValidity < MinServingValidity || cfg.CAValidity < renewDivisor*cfg.ServingValidity:
		return nil, fmt.Errorf("managed serving certificate: validities %s (serving) and %s (CA) are out of range", cfg.ServingValidity, cfg.CAValidity)
	}
	return &Controller{
		cfg: cfg,
		policy: policy{dnsNames: slices.Clone(cfg.DNSNames), servingValidity: cfg.ServingValidity, caValidity: cfg.CAValidity,
			grace: min(maxGrace, cfg.ServingValidity/10)},
		interval:  min(maxInterval, cfg.ServingValidity/12),
		client:    client,
		secrets:   client.CoreV1().Secrets(cfg.Namespace),
		publisher: publisher,
		clock:     clk,
		trigger:   make(chan struct{}, 1),
	}, nil
}

// Name identifies the provider in k8s.io/apiserver's logs.
func (c *Controller) Name() string {
	return "managed-serving-cert::" + c.cfg.Namespace + "/" + c.cfg.SecretName
}

// CurrentCertKeyContent returns the serving certificate and its key, PEM; both
// nil before the first successful sync.
func (c *Controller) CurrentCertKeyContent() ([]byte, []byte) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, c.key
}

// CABundle returns the CA certificates that verify the serving certificate,
// PEM, newest first; nil before the first successful sync.
func (c *Controller) CABundle() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.bundle
}

// AddListener registers l to be told (Enqueue) whenever the certificate or key changes.
func (c *Controller) AddListener(l dynamiccertificates.Listener) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listeners = append(c.listeners, l)
}

// RunOnce brings the Secret up to date once (creating, adopting or rotating),
// loads it and publishes the CA bundle. See sync for the errors.
func (c *Controller) RunOnce(ctx context.Context) error { return c.sync(ctx) }

// Run keeps the certificate up to date until ctx is done: it watches the one
// Secret (a field-selector informer, so RBAC can name it) and syncs on each
// change, at least every min(1m, ServingValidity/12), and after a failure with
// a backoff from 1s doubling up to that period. workers is ignored: one loop
// suffices.
func (c *Controller) Run(ctx context.Context, _ int) {
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0,
		informers.WithNamespace(c.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.cfg.SecretName).String()
		}))
	kick := func(any) { c.kick() }
	if _, err := factory.Core().V1().Secrets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(_, o any) { kick(o) }, DeleteFunc: kick,
	}); err != nil {
		klog.ErrorS(err, "Watching the serving certificate Secret failed", "secret", klog.KRef(c.cfg.Namespace, c.cfg.SecretName))
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	ticker := c.clock.NewTicker(c.interval)
	defer ticker.Stop()
	failures := 0
	for {
		var retryC <-chan time.Time
		if err := c.sync(ctx); err != nil {
			failures++
			delay := min(c.interval, time.Second<<min(failures-1, 10))
			klog.ErrorS(err, "Managing the serving certificate failed", "secret", klog.KRef(c.cfg.Namespace, c.cfg.SecretName), "retryIn", delay)
			retryC = c.clock.After(delay)
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-c.trigger:
		case <-ticker.C():
		case <-retryC:
		}
	}
}

func (c *Controller) kick() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// sync reads the Secret, creates it when missing, refuses it when corrupt,
// writes the next rotation step when one is due, loads the result and
// publishes the CA bundle.
//
// Concurrency with other replicas: Create meeting AlreadyExists and Update
// meeting Conflict (the write carries the resourceVersion read) both re-read
// the Secret and decide again, so every replica ends up serving what the one
// that won wrote.
//
// A Secret that is not ours or cannot be parsed is never overwritten: the
// error says so and how to recover; the certificate already loaded (if any)
// keeps being served.
func (c *Controller) sync(ctx context.Context) error {
	ref := klog.KRef(c.cfg.Namespace, c.cfg.SecretName)
	var m *material
	published := false
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		secret, err := c.secrets.Get(ctx, c.cfg.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if m, err = c.create(ctx); err == nil {
				klog.InfoS("Created the serving certificate Secret with a new CA", "secret", ref,
					"dnsNames", m.serving.DNSNames, "notAfter", m.serving.NotAfter, "caNotAfter", m.signer.NotAfter)
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("reading Secret %s/%s: %w", c.cfg.Namespace, c.cfg.SecretName, err)
		}
		cur, err := c.decode(secret)
		if err != nil {
			return err
		}
		published = c.publish(ctx, cur.data[KeyCABundle]) == nil
		next, reasons, err := plan(cur, c.clock.Now(), c.policy, published)
		if err != nil {
			return err
		}
		if next == nil {
			m = cur
			return nil
		}
		updated := secret.DeepCopy()
		updated.Data = next.data
		if _, err := c.secrets.Update(ctx, updated, metav1.UpdateOptions{FieldManager: apiservice.FieldManager}); err != nil {
			return fmt.Errorf("writing Secret %s/%s: %w", c.cfg.Namespace, c.cfg.SecretName, err)
		}
		klog.InfoS("Rotated the serving certificate Secret", "secret", ref, "changes", reasons,
			"notAfter", next.serving.NotAfter, "cas", len(next.cas))
		m, published = next, false
		return nil
	})
	if err != nil {
		return err
	}
	c.load(m)
	if !published {
		if err := c.publish(ctx, m.data[KeyCABundle]); err != nil {
			return fmt.Errorf("publishing the CA bundle: %w", err)
		}
	}
	return nil
}

// create makes new material and creates the Secret with it.
func (c *Controller) create(ctx context.Context) (*material, error) {
	m, err := fresh(c.clock.Now(), c.policy)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.cfg.SecretName, Namespace: c.cfg.Namespace,
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{
				"saturation-adapter.io/description": "CA and serving certificate of the saturation-adapter, managed by the adapter itself (--tls-managed-secret). Delete it to start over with a new CA.",
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: m.data,
	}
	if _, err := c.secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: apiservice.FieldManager}); err != nil {
		return nil, fmt.Errorf("creating Secret %s/%s: %w", c.cfg.Namespace, c.cfg.SecretName, err)
	}
	return m, nil
}

// decode parses a Secret read from the API, refusing any that this package did
// not create or that is damaged.
func (c *Controller) decode(s *corev1.Secret) (*material, error) {
	fix := fmt.Sprintf("refusing to overwrite it; to start over with a new CA, delete it (kubectl -n %s delete secret %s) and the adapter creates a new one, or set --tls-managed-secret to another name",
		c.cfg.Namespace, c.cfg.SecretName)
	if s.Labels[ManagedByLabel] != ManagedByValue || s.Type != corev1.SecretTypeTLS {
		return nil, fmt.Errorf("secret %s/%s (type %s, label %s=%q): %w (it lacks type %s and label %s=%s); %s",
			c.cfg.Namespace, c.cfg.SecretName, s.Type, ManagedByLabel, s.Labels[ManagedByLabel], errCorrupt,
			corev1.SecretTypeTLS, ManagedByLabel, ManagedByValue, fix)
	}
	m, err := parse(s.Data)
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w; %s", c.cfg.Namespace, c.cfg.SecretName, err, fix)
	}
	return m, nil
}

func (c *Controller) publish(ctx context.Context, bundle []byte) error {
	if c.publisher == nil {
		return nil
	}
	return c.publisher.Publish(ctx, bundle)
}

// load makes m the served content and tells the listeners when it changed.
func (c *Controller) load(m *material) {
	cert, key, bundle := m.data[KeyServingCert], m.data[KeyServingKey], m.data[KeyCABundle]
	c.mu.Lock()
	changed := !bytes.Equal(c.cert, cert) || !bytes.Equal(c.key, key)
	c.cert, c.key, c.bundle = cert, key, bundle
	listeners := slices.Clone(c.listeners)
	c.mu.Unlock()
	if !changed {
		return
	}
	klog.InfoS("Loaded the managed serving certificate", "secret", klog.KRef(c.cfg.Namespace, c.cfg.SecretName),
		"serial", m.serving.SerialNumber.Text(16), "notAfter", m.serving.NotAfter, "issuer", m.issuer.Subject.CommonName,
		"bundle", commonNames(m.cas))
	for _, l := range listeners {
		l.Enqueue()
	}
}

func commonNames(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Subject.CommonName
	}
	return out
}
