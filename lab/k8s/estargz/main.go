// ai-l1-estargz-convert: copies an image from the lab registry as eStargz (the Stargz snapshotter's
// lazily pullable layer format), the job upstream's `ctr-remote images convert --estargz --oci`
// does. Lab tooling only (lab/mirror/mirror.py runs it after publishing the lab images); a site
// converts its images with its own pipeline.
//
// Each layer is rebuilt by the estargz library (stargz-snapshotter/estargz) and pushed as an OCI
// layer carrying the TOC digest annotation, which is what tells the snapshotter a layer can be
// mounted remotely. The manifest is OCI (Docker schema 2 has no layer annotations).
//
//	ai-l1-estargz-convert [--insecure] [--force] SRC DST
//
// Prints the pushed manifest digest. The manifest's annotation ai-l1.source-digest names the
// source's digest: a DST already converted from the same SRC digest is not converted again.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const sourceAnnotation = "ai-l1.source-digest"

func main() {
	insecure := flag.Bool("insecure", false, "plain HTTP registries")
	force := flag.Bool("force", false, "convert even when DST was converted from SRC's digest")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: ai-l1-estargz-convert [--insecure] [--force] SRC DST")
		os.Exit(2)
	}
	digest, err := convert(flag.Arg(0), flag.Arg(1), *insecure, *force)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ai-l1-estargz-convert:", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

func convert(src, dst string, insecure, force bool) (string, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	srcRef, err := name.ParseReference(src, opts...)
	if err != nil {
		return "", err
	}
	dstRef, err := name.ParseReference(dst, opts...)
	if err != nil {
		return "", err
	}
	img, err := remote.Image(srcRef)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", src, err)
	}
	srcDigest, err := img.Digest()
	if err != nil {
		return "", err
	}
	if have, err := remote.Image(dstRef); err == nil && !force {
		if m, err := have.Manifest(); err == nil && m.Annotations[sourceAnnotation] == srcDigest.String() {
			d, err := have.Digest()
			return d.String(), err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	layers, err := img.Layers()
	if err != nil {
		return "", err
	}
	out := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for i, layer := range layers {
		add, err := toEstargz(layer)
		if err != nil {
			return "", fmt.Errorf("layer %d of %s: %w", i, src, err)
		}
		if out, err = mutate.Append(out, add); err != nil {
			return "", err
		}
	}
	// The source's runtime settings (entrypoint, env, user...) and platform; rootfs and history
	// are the new layers'.
	outCfg, err := out.ConfigFile()
	if err != nil {
		return "", err
	}
	outCfg = outCfg.DeepCopy()
	outCfg.Config = cfg.Config
	outCfg.Architecture, outCfg.OS, outCfg.Variant = cfg.Architecture, cfg.OS, cfg.Variant
	outCfg.Created = cfg.Created
	if out, err = mutate.ConfigFile(out, outCfg); err != nil {
		return "", err
	}
	out = mutate.Annotations(out, map[string]string{sourceAnnotation: srcDigest.String()}).(v1.Image)
	if err := remote.Write(dstRef, out); err != nil {
		return "", fmt.Errorf("push %s: %w", dst, err)
	}
	d, err := out.Digest()
	return d.String(), err
}

// toEstargz rebuilds one layer (any compression the library reads) as a gzip eStargz blob.
func toEstargz(layer v1.Layer) (mutate.Addendum, error) {
	rc, err := layer.Compressed()
	if err != nil {
		return mutate.Addendum{}, err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp("", "estargz-src-*")
	if err != nil {
		return mutate.Addendum{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	size, err := io.Copy(tmp, rc)
	if err != nil {
		return mutate.Addendum{}, err
	}
	blob, err := estargz.Build(io.NewSectionReader(tmp, 0, size))
	if err != nil {
		return mutate.Addendum{}, err
	}
	defer blob.Close()
	data, err := io.ReadAll(blob)
	if err != nil {
		return mutate.Addendum{}, err
	}
	uncompressed, err := blob.UncompressedSize()
	if err != nil {
		return mutate.Addendum{}, err
	}
	// From the compressed bytes as they are (their digest is the blob's); the diff ID comes from
	// decompressing them, as the image config must list it.
	rebuilt, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return mutate.Addendum{}, err
	}
	if diffID, err := rebuilt.DiffID(); err != nil || diffID.String() != blob.DiffID().String() {
		return mutate.Addendum{}, fmt.Errorf("diff ID %v of the rebuilt layer is not the builder's %s (%v)", diffID, blob.DiffID(), err)
	}
	return mutate.Addendum{
		Layer:     rebuilt,
		MediaType: types.OCILayer,
		Annotations: map[string]string{
			estargz.TOCJSONDigestAnnotation:         blob.TOCDigest().String(),
			estargz.StoreUncompressedSizeAnnotation: strconv.FormatInt(uncompressed, 10),
		},
	}, nil
}
