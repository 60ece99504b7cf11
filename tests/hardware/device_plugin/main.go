// ai-l1-device-plugin: the lab's STAND-IN for the NVIDIA Kubernetes device plugin.
//
// NVIDIA's plugin cannot be obtained on these machines (the Go module proxy refuses
// github.com/NVIDIA/k8s-device-plugin), so the lab runs this program in the image slot of the
// production DaemonSet (roles/k8s_device_plugins) and nothing else changes: the same config
// file (/config/config.json: flags.migStrategy, flags.plugin.deviceListStrategy,
// sharing.timeSlicing), the same host mounts (the device-plugin directory and the driver root
// at /driver-root) and the same kubelet API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1).
//
// Devices come from the node's driver: /driver-root/usr/bin/nvidia-smi -L, which on a lab node
// is the simulated NVML (tests/hardware/nvml) installed by the lab's driver package. GPUs and
// MIG devices are advertised by the MIG strategy (none: every GPU as nvidia.com/gpu; single:
// MIG devices as nvidia.com/gpu; mixed: nvidia.com/mig-<profile> beside nvidia.com/gpu), time
// slicing multiplies them, and Allocate answers as NVIDIA's plugin does for the envvar and
// cdi-cri strategies (NVIDIA_VISIBLE_DEVICES=<uuids>, CDI names nvidia.com/gpu=<uuid>).
//
// Invoked as `device-plugin` (the binary name of Huawei's mind-cluster Ascend device plugin,
// which its DaemonSet runs through bash with Huawei's flags), it stands in for that plugin
// instead: the NPU chips are the node's /dev/davinci<N> device files (on a lab node created
// by the 910B hardware profile), advertised as huawei.com/Ascend910 and allocated with
// ASCEND_VISIBLE_DEVICES=<n,...> (-useAscendDocker=true, the Ascend docker runtime's variable)
// or as device specs (-useAscendDocker=false).
//
// What it does not do: open /dev/nvidia* nodes, health events from XIDs (a device is
// Healthy while the driver lists it), topology-aware preferred allocation.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// config is the subset of NVIDIA's plugin config file (version v1) this stand-in honours.
type config struct {
	Version string `json:"version"`
	Flags   struct {
		MigStrategy string `json:"migStrategy"`
		Plugin      struct {
			DeviceListStrategy json.RawMessage `json:"deviceListStrategy"`
		} `json:"plugin"`
	} `json:"flags"`
	Sharing struct {
		TimeSlicing struct {
			Resources []struct {
				Name     string `json:"name"`
				Replicas int    `json:"replicas"`
			} `json:"resources"`
		} `json:"timeSlicing"`
	} `json:"sharing"`
}

type options struct {
	vendor        string // nvidia or ascend
	migStrategy   string
	listStrategy  map[string]bool
	replicas      map[string]int
	driverRoot    string
	pluginDir     string
	pollInterval  time.Duration
	visibleEnvVar string
}

// device is one allocatable unit: a GPU, or a MIG device, by its UUID.
type device struct {
	uuid     string
	resource string
}

var (
	gpuLine = regexp.MustCompile(`^GPU (\d+): (.+) \(UUID: (GPU-[^)]+)\)$`)
	migLine = regexp.MustCompile(`^\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[^)]+)\)$`)
)

// loadAscendOptions reads Huawei's device-plugin flags the stand-in honours and ignores the
// rest (the real plugin has many: -volcanoType, -presetVirtualDevice, -logLevel, ...).
func loadAscendOptions(args []string) options {
	o := options{vendor: "ascend", pluginDir: pluginapi.DevicePluginPath, pollInterval: 5 * time.Second,
		replicas: map[string]int{}, listStrategy: map[string]bool{"envvar": true}, visibleEnvVar: "ASCEND_VISIBLE_DEVICES"}
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "useAscendDocker":
			if value == "false" {
				o.listStrategy = map[string]bool{"devices": true}
			}
		case "listWatchPeriod":
			if n, err := time.ParseDuration(value + "s"); err == nil && n > 0 {
				o.pollInterval = n
			}
		}
	}
	return o
}

func loadOptions() (options, error) {
	if filepath.Base(os.Args[0]) == "device-plugin" {
		return loadAscendOptions(os.Args[1:]), nil
	}
	cfgPath := flag.String("config-file", envOr("CONFIG_FILE", ""), "NVIDIA plugin config file (JSON or the JSON subset of YAML)")
	mig := flag.String("mig-strategy", envOr("MIG_STRATEGY", "none"), "none, single or mixed")
	list := flag.String("device-list-strategy", envOr("DEVICE_LIST_STRATEGY", "envvar"), "envvar and/or cdi-cri, comma-separated")
	root := flag.String("container-driver-root", envOr("CONTAINER_DRIVER_ROOT", "/driver-root"), "where the host's driver root is mounted")
	poll := flag.Duration("poll", 5*time.Second, "how often devices are re-read")
	flag.Parse()
	o := options{vendor: "nvidia", migStrategy: *mig, driverRoot: *root, pluginDir: pluginapi.DevicePluginPath, pollInterval: *poll,
		replicas: map[string]int{}, listStrategy: map[string]bool{}, visibleEnvVar: "NVIDIA_VISIBLE_DEVICES"}
	strategies := strings.Split(*list, ",")
	if *cfgPath != "" {
		raw, err := os.ReadFile(*cfgPath)
		if err != nil {
			return o, err
		}
		var c config
		if err := json.Unmarshal(raw, &c); err != nil {
			return o, fmt.Errorf("%s: %w", *cfgPath, err)
		}
		if c.Version != "v1" {
			return o, fmt.Errorf("%s: version %q, want v1", *cfgPath, c.Version)
		}
		if c.Flags.MigStrategy != "" {
			o.migStrategy = c.Flags.MigStrategy
		}
		if len(c.Flags.Plugin.DeviceListStrategy) > 0 {
			var one string
			var many []string
			if json.Unmarshal(c.Flags.Plugin.DeviceListStrategy, &one) == nil {
				strategies = []string{one}
			} else if json.Unmarshal(c.Flags.Plugin.DeviceListStrategy, &many) == nil {
				strategies = many
			}
		}
		for _, r := range c.Sharing.TimeSlicing.Resources {
			if r.Replicas < 1 {
				return o, fmt.Errorf("%s: time-slicing replicas of %s must be at least 1", *cfgPath, r.Name)
			}
			o.replicas[r.Name] = r.Replicas
		}
	}
	switch o.migStrategy {
	case "none", "single", "mixed":
	default:
		return o, fmt.Errorf("unknown MIG strategy %q (none, single, mixed)", o.migStrategy)
	}
	for _, s := range strategies {
		switch s = strings.TrimSpace(s); s {
		case "envvar", "cdi-cri":
			o.listStrategy[s] = true
		default:
			return o, fmt.Errorf("device list strategy %q is not supported by the stand-in (envvar, cdi-cri)", s)
		}
	}
	return o, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var davinci = regexp.MustCompile(`^davinci(\d+)$`)

// discoverAscend: one device per NPU chip, /dev/davinci<N> (the driver's device files).
func discoverAscend() ([]device, error) {
	entries, err := os.ReadDir("/dev")
	if err != nil {
		return nil, err
	}
	var devs []device
	for _, e := range entries {
		if m := davinci.FindStringSubmatch(e.Name()); m != nil {
			devs = append(devs, device{uuid: m[1], resource: "huawei.com/Ascend910"})
		}
	}
	sort.Slice(devs, func(i, j int) bool {
		return len(devs[i].uuid) < len(devs[j].uuid) || (len(devs[i].uuid) == len(devs[j].uuid) && devs[i].uuid < devs[j].uuid)
	})
	return devs, nil
}

// discover lists the node's devices through the driver's nvidia-smi and maps them to resources.
func discover(o options) ([]device, error) {
	if o.vendor == "ascend" {
		return discoverAscend()
	}
	root := o.driverRoot
	cmd := exec.Command(filepath.Join(root, "usr/bin/nvidia-smi"), "-L")
	cmd.Env = append(os.Environ(),
		"LD_LIBRARY_PATH="+strings.Join([]string{root + "/usr/lib/x86_64-linux-gnu", root + "/usr/lib64", root + "/usr/lib"}, ":"),
		// the simulated NVML keeps its scenario and state on the host
		"AI_L1_FAKE_NVML_SCENARIO="+root+"/etc/ai-l1-fake/nvml-scenario",
		"AI_L1_FAKE_NVML_STATE="+root+"/var/lib/ai-l1-fake/nvml-state")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi -L: %w", err)
	}
	type gpu struct {
		uuid string
		migs []device
	}
	var gpus []*gpu
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if m := gpuLine.FindStringSubmatch(line); m != nil {
			gpus = append(gpus, &gpu{uuid: m[3]})
		} else if m := migLine.FindStringSubmatch(line); m != nil && len(gpus) > 0 {
			g := gpus[len(gpus)-1]
			g.migs = append(g.migs, device{uuid: m[2], resource: "nvidia.com/mig-" + m[1]})
		}
	}
	var devs []device
	for _, g := range gpus {
		switch {
		case o.migStrategy == "none" || len(g.migs) == 0:
			devs = append(devs, device{uuid: g.uuid, resource: "nvidia.com/gpu"})
		case o.migStrategy == "single":
			for _, m := range g.migs {
				devs = append(devs, device{uuid: m.uuid, resource: "nvidia.com/gpu"})
			}
		default: // mixed
			devs = append(devs, g.migs...)
		}
	}
	return devs, nil
}

// plugin serves one resource on its own socket.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	socket   string
	opts     options
	server   *grpc.Server
	mu       sync.Mutex
	devices  []*pluginapi.Device
	ids      map[string]string // advertised ID -> device UUID
	updates  chan struct{}
}

func newPlugin(resource string, o options) *plugin {
	name := strings.NewReplacer("/", "-", ".", "-").Replace(resource)
	return &plugin{resource: resource, socket: filepath.Join(o.pluginDir, "ai-l1-"+name+".sock"), opts: o,
		ids: map[string]string{}, updates: make(chan struct{}, 1)}
}

// set replaces the advertised devices (time slicing: each device replicas times, as <uuid>::<n>).
func (p *plugin) set(uuids []string) bool {
	replicas := p.opts.replicas[p.resource]
	ids := map[string]string{}
	var devs []*pluginapi.Device
	for _, u := range uuids {
		if replicas <= 1 {
			id := u
			if p.opts.vendor == "ascend" {
				id = "Ascend910-" + u
			}
			ids[id] = u
			devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
			continue
		}
		for n := 0; n < replicas; n++ {
			id := fmt.Sprintf("%s::%d", u, n)
			ids[id] = u
			devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if same(p.devices, devs) {
		return false
	}
	p.devices, p.ids = devs, ids
	select {
	case p.updates <- struct{}{}:
	default:
	}
	return true
}

func same(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Health != b[i].Health {
			return false
		}
	}
	return true
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		devs := append([]*pluginapi.Device(nil), p.devices...)
		p.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-p.updates:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		var uuids []string
		seen := map[string]bool{}
		for _, id := range creq.DevicesIds {
			u, ok := p.ids[id]
			if !ok {
				return nil, fmt.Errorf("%s: unknown device %q", p.resource, id)
			}
			if !seen[u] {
				seen[u] = true
				uuids = append(uuids, u)
			}
		}
		sort.Strings(uuids)
		cresp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		if p.opts.listStrategy["devices"] {
			for _, u := range uuids {
				cresp.Devices = append(cresp.Devices, &pluginapi.DeviceSpec{
					ContainerPath: "/dev/davinci" + u, HostPath: "/dev/davinci" + u, Permissions: "rw"})
			}
			for _, f := range []string{"davinci_manager", "devmm_svm", "hisi_hdc"} {
				cresp.Devices = append(cresp.Devices, &pluginapi.DeviceSpec{
					ContainerPath: "/dev/" + f, HostPath: "/dev/" + f, Permissions: "rw"})
			}
		}
		if p.opts.listStrategy["envvar"] {
			cresp.Envs[p.opts.visibleEnvVar] = strings.Join(uuids, ",")
		}
		if p.opts.listStrategy["cdi-cri"] {
			for _, u := range uuids {
				cresp.CdiDevices = append(cresp.CdiDevices, &pluginapi.CDIDevice{Name: "nvidia.com/gpu=" + u})
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve starts the gRPC server on the plugin's socket and registers it with the kubelet.
func (p *plugin) serve() error {
	_ = os.Remove(p.socket)
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		return err
	}
	p.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(p.socket), ResourceName: p.resource,
		Options: &pluginapi.DevicePluginOptions{}})
	if err != nil {
		return fmt.Errorf("register %s with the kubelet: %w", p.resource, err)
	}
	log.Printf("registered %s on %s", p.resource, p.socket)
	return nil
}

func (p *plugin) stop() {
	if p.server != nil {
		p.server.Stop()
		p.server = nil
	}
	_ = os.Remove(p.socket)
}

func inode(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	o, err := loadOptions()
	if err != nil {
		log.Fatalf("config: %v", err)
	}
	if o.vendor == "ascend" {
		log.Printf("stand-in for Huawei's Ascend device plugin: allocation %v", o.listStrategy)
	} else {
		log.Printf("stand-in for the NVIDIA device plugin: migStrategy=%s deviceListStrategy=%v timeSlicing=%v",
			o.migStrategy, o.listStrategy, o.replicas)
	}
	plugins := map[string]*plugin{}
	kubelet := uint64(0)
	for ; ; time.Sleep(o.pollInterval) {
		devs, err := discover(o)
		if err != nil {
			log.Printf("discovery failed, advertising nothing: %v", err)
			devs = nil
		}
		byResource := map[string][]string{}
		for _, d := range devs {
			byResource[d.resource] = append(byResource[d.resource], d.uuid)
		}
		// a restarted kubelet forgets every plugin: serve and register again
		if now := inode(pluginapi.KubeletSocket); now != kubelet {
			for _, p := range plugins {
				p.stop()
			}
			plugins, kubelet = map[string]*plugin{}, now
		}
		for res := range byResource {
			if _, ok := plugins[res]; !ok {
				plugins[res] = newPlugin(res, o)
			}
		}
		for res, p := range plugins {
			if p.set(byResource[res]) {
				log.Printf("%s: %d devices", res, len(p.devices))
			}
			if p.server == nil {
				if err := p.serve(); err != nil {
					log.Printf("%v", err)
					p.stop()
				}
			}
		}
	}
}
