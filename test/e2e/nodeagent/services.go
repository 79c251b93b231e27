package nodeagent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// serviceProxy stands in for kube-proxy and the EndpointSlice controller for the
// Services with a selector in one namespace, so that a client of a Service's ClusterIP
// (the aggregator, for an APIService) reaches its pods as on a real cluster:
//
//   - kube-proxy: it listens on each ClusterIP and port (a loopback address, from
//     controlplane's Options.ServiceCIDR) and relays each connection, bytes unchanged
//     (TLS ends at the pod), to a Ready pod the Service selects, chosen at random, on
//     the targetPort (a number, or the pod's container port of that name).
//   - EndpointSlice controller: it keeps one EndpointSlice per Service listing the Ready
//     pods, which the aggregator's availability check reads (an APIService whose
//     Service has no ready endpoint for its port is MissingEndpoints). EndpointSlice
//     validation rejects loopback addresses, the only pod IPs here, so the slice has
//     addressType FQDN and names each pod <pod>.<namespace>.pod.e2e.invalid (RFC 6761:
//     never resolves); nothing dials those names, as the aggregator dials the ClusterIP.
//
// It reconciles every serviceSyncPeriod from informer caches.
type serviceProxy struct {
	o        Options
	ctx      context.Context
	services listersv1.ServiceLister
	pods     listersv1.PodLister
	slices   discoverylisters.EndpointSliceLister
	synced   []cache.InformerSynced

	mu        sync.Mutex
	listeners map[string]*forwarder // "ip:port" → listener
	wg        sync.WaitGroup
}

// serviceSyncPeriod is how often Services, listeners and slices are reconciled.
const serviceSyncPeriod = 250 * time.Millisecond

// endpointSliceManager is the managed-by label of the slices the agent writes.
const endpointSliceManager = "e2e-node-agent"

func newServiceProxy(ctx context.Context, o Options, factory informers.SharedInformerFactory) (*serviceProxy, error) {
	svc := factory.Core().V1().Services()
	pods := factory.Core().V1().Pods()
	slices := factory.Discovery().V1().EndpointSlices()
	return &serviceProxy{
		o: o, ctx: ctx, services: svc.Lister(), pods: pods.Lister(), slices: slices.Lister(),
		synced:    []cache.InformerSynced{svc.Informer().HasSynced, pods.Informer().HasSynced, slices.Informer().HasSynced},
		listeners: map[string]*forwarder{},
	}, nil
}

// start waits for the caches and runs the sync loop until the agent's context ends.
func (p *serviceProxy) start(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return fmt.Errorf("service informer for namespace %s did not sync", p.o.Namespace)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(serviceSyncPeriod)
		defer t.Stop()
		for {
			p.sync()
			select {
			case <-p.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// stop closes every listener (and the connections relayed) once the loop has ended.
func (p *serviceProxy) stop() {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, f := range p.listeners {
		f.Close()
		delete(p.listeners, k)
	}
}

func (p *serviceProxy) sync() {
	services, _ := p.services.List(labels.Everything())
	want := map[string]bool{}
	for _, svc := range services {
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Selector) == 0 ||
			svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		if ip := net.ParseIP(svc.Spec.ClusterIP); ip == nil || !ip.IsLoopback() {
			p.o.Logf("service %s: ClusterIP %s is not a loopback address: not proxied", svc.Name, svc.Spec.ClusterIP)
			continue
		}
		for _, port := range svc.Spec.Ports {
			addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port.Port)))
			want[addr] = true
			p.listen(addr, svc.Name, port)
		}
		if err := p.syncSlice(svc); err != nil && p.ctx.Err() == nil {
			p.o.Logf("service %s: endpoint slice: %v", svc.Name, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, f := range p.listeners {
		if !want[addr] {
			f.Close()
			delete(p.listeners, addr)
		}
	}
}

// listen opens addr for the Service's port unless it is open.
func (p *serviceProxy) listen(addr, service string, port corev1.ServicePort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.listeners[addr]; ok {
		return
	}
	f, err := newForwarder(addr, func() (string, error) { return p.pick(service, port.Name) })
	if err != nil {
		p.o.Logf("service %s: listening on %s: %v", service, addr, err)
		return
	}
	p.listeners[addr] = f
	p.o.Logf("service %s: proxying %s", service, addr)
}

// pick returns the address of a random Ready pod of the Service for its port portName,
// as read at connection time.
func (p *serviceProxy) pick(service, portName string) (string, error) {
	svc, err := p.services.Services(p.o.Namespace).Get(service)
	if err != nil {
		return "", err
	}
	var port *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == portName {
			port = &svc.Spec.Ports[i]
		}
	}
	if port == nil {
		return "", fmt.Errorf("service %s has no port %q", service, portName)
	}
	var addrs []string
	for _, pod := range p.ready(svc) {
		if n := targetPort(pod, *port); n > 0 {
			addrs = append(addrs, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(n)))
		}
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("service %s: no Ready endpoint", service)
	}
	return addrs[rand.IntN(len(addrs))], nil
}

// ready lists the Ready, non-terminating pods the Service selects.
func (p *serviceProxy) ready(svc *corev1.Service) []*corev1.Pod {
	pods, _ := p.pods.Pods(p.o.Namespace).List(labels.SelectorFromSet(svc.Spec.Selector))
	var out []*corev1.Pod
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil && pod.Status.PodIP != "" && podReady(pod) {
			out = append(out, pod)
		}
	}
	return out
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// targetPort resolves the Service port's targetPort on pod: a number (0 means the
// port itself) or the name of one of the pod's container ports; 0 if unknown.
func targetPort(pod *corev1.Pod, port corev1.ServicePort) int {
	tp := port.TargetPort
	if tp.Type == intstr.Int {
		if tp.IntValue() == 0 {
			return int(port.Port)
		}
		return tp.IntValue()
	}
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == tp.StrVal {
				return int(cp.ContainerPort)
			}
		}
	}
	return 0
}

// syncSlice creates or updates the Service's EndpointSlice to list its Ready pods.
func (p *serviceProxy) syncSlice(svc *corev1.Service) error {
	ready := p.ready(svc)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name + "-" + endpointSliceManager,
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   endpointSliceManager,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints:   []discoveryv1.Endpoint{},
		Ports:       []discoveryv1.EndpointPort{},
	}
	for _, pod := range ready {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{pod.Name + "." + pod.Namespace + ".pod.e2e.invalid"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(p.o.NodeName),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		})
	}
	for _, port := range svc.Spec.Ports {
		n := int(port.Port)
		if len(ready) > 0 {
			n = targetPort(ready[0], port)
		}
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(port.Name), Port: ptr.To(int32(n)), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	client := p.o.Client.DiscoveryV1().EndpointSlices(svc.Namespace)
	cur, err := p.slices.EndpointSlices(svc.Namespace).Get(slice.Name)
	if apierrors.IsNotFound(err) {
		_, err = client.Create(p.ctx, slice, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // the cache is behind
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if apiequality.Semantic.DeepEqual(cur.Endpoints, slice.Endpoints) && apiequality.Semantic.DeepEqual(cur.Ports, slice.Ports) {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Endpoints, upd.Ports = slice.Endpoints, slice.Ports
	_, err = client.Update(p.ctx, upd, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) { // the cache is behind: the next sync retries
		return nil
	}
	return err
}
