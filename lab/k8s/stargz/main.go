// containerd-stargz-grpc for the lab: the Stargz snapshotter v0.19.1 served as a containerd proxy
// plugin. Upstream's main package lives in the module github.com/containerd/stargz-snapshotter/cmd,
// which the Go module proxy does not serve (it is never tagged); this main wires the same library
// packages of the root module the way upstream's does (service, keychainconfig, snapshotservice),
// with the flags and config file upstream's daemon takes. Production installs upstream's release
// archive (artifacts/manifest.yml: stargz-snapshotter); see lab/k8s/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/log"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/keychain/keychainconfig"
	"github.com/containerd/stargz-snapshotter/service/resolver"
	"github.com/containerd/stargz-snapshotter/version"
	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/pelletier/go-toml"
	"google.golang.org/grpc"
)

// config is upstream's daemon file: the service's settings at the top level and, as in the
// built-in plugin, a CRI-style [registry] (config_path = containerd's certs.d: one registry
// configuration for containerd and the snapshotter).
type config struct {
	service.Config
	Registry resolver.Registry `toml:"registry"`
}

func main() {
	address := flag.String("address", "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock", "address for the snapshotter's gRPC server")
	configPath := flag.String("config", "/etc/containerd-stargz-grpc/config.toml", "path to the configuration file")
	logLevel := flag.String("log-level", "info", "set the logging level [trace, debug, info, warn, error, fatal, panic]")
	root := flag.String("root", "/var/lib/containerd-stargz-grpc", "path to the root directory for this snapshotter")
	printVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *printVersion {
		fmt.Println("containerd-stargz-grpc", version.Version, version.Revision)
		return
	}
	if err := log.SetLevel(*logLevel); err != nil {
		fmt.Fprintf(os.Stderr, "invalid --log-level %q: %v\n", *logLevel, err)
		os.Exit(2)
	}
	ctx := log.WithLogger(context.Background(), log.L)
	if err := run(ctx, *address, *configPath, *root); err != nil {
		log.G(ctx).WithError(err).Fatal("containerd-stargz-grpc failed")
	}
}

func run(ctx context.Context, address, configPath, root string) error {
	var cfg config
	// go-toml v1 as upstream: it honours the `default:` tags of the fs config (directory_cache.direct).
	tree, err := toml.LoadFile(configPath)
	if err != nil && !(os.IsNotExist(err) && configPath == flag.Lookup("config").DefValue) {
		return fmt.Errorf("load config %s: %w", configPath, err)
	}
	if tree != nil {
		if err := tree.Unmarshal(&cfg); err != nil {
			return fmt.Errorf("parse config %s: %w", configPath, err)
		}
	}
	if err := service.Supported(root); err != nil {
		return fmt.Errorf("snapshotter root %s cannot hold overlayfs snapshots: %w", root, err)
	}

	rpc := grpc.NewServer()
	creds, criListener, err := keychainconfig.ConfigKeychain(ctx, rpc, &keychainconfig.Config{
		EnableKubeKeychain: cfg.KubeconfigKeychainConfig.EnableKeychain,
		EnableCRIKeychain:  cfg.CRIKeychainConfig.EnableKeychain,
		KubeconfigPath:     cfg.KubeconfigKeychainConfig.KubeconfigPath,
	})
	if err != nil {
		return fmt.Errorf("configure keychain: %w", err)
	}
	if criListener != nil {
		// The CRI keychain's image service proxy is not wired here: refuse it instead of
		// accepting a setting that would do nothing.
		return fmt.Errorf("[cri_keychain] enable_keychain is not supported by this build")
	}
	opts := []service.Option{service.WithCredsFuncs(creds...)}
	if cfg.Registry.ConfigPath != "" || len(cfg.Registry.Mirrors) > 0 || len(cfg.Registry.Configs) > 0 {
		opts = append(opts, service.WithCustomRegistryHosts(resolver.RegistryHostsFromCRIConfig(ctx, cfg.Registry, creds...)))
	}
	sn, err := service.NewStargzSnapshotterService(ctx, root, &cfg.Config, opts...)
	if err != nil {
		return fmt.Errorf("start the snapshotter: %w", err)
	}
	snapshotsapi.RegisterSnapshotsServer(rpc, snapshotservice.FromSnapshotter(sn))

	if err := os.MkdirAll(filepath.Dir(address), 0o700); err != nil {
		return err
	}
	if err := os.RemoveAll(address); err != nil {
		return err
	}
	l, err := net.Listen("unix", address)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", address, err)
	}
	errCh := make(chan error, 1)
	go func() { errCh <- rpc.Serve(l) }()
	if _, err := sddaemon.SdNotify(false, sddaemon.SdNotifyReady); err != nil {
		log.G(ctx).WithError(err).Warn("sd_notify READY failed")
	}
	log.G(ctx).WithField("root", root).WithField("address", address).Info("containerd-stargz-grpc serving")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var got os.Signal
	select {
	case got = <-sig:
		log.G(ctx).Infof("got %v, shutting down", got)
	case err := <-errCh:
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	rpc.Stop()
	// As upstream's daemon: SIGINT unmounts every layer; SIGTERM (systemd's stop) leaves the
	// snapshot state alone and the next start restores the remote snapshots.
	if got == syscall.SIGINT {
		return sn.Close()
	}
	return nil
}
