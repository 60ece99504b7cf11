/*
 * Fake nvidia-smi: answers through NVML (our fake libnvidia-ml.so.1), as the
 * real tool does, so it always agrees with what pynvml sees.
 * Supported: no arguments (summary), -L, --version, -i/--id=N[,M...],
 * --query-gpu=f1,f2,... --query-compute-apps=f1,... --format=csv[,noheader][,nounits],
 * -mig 0|1, and `mig` with -lgip, -lgi, -cgi LIST [-C], -dci, -dgi, -lci [-gi ID].
 * Changes (MIG mode, GPU instances) are appended to the fake's state file
 * ($AI_L1_FAKE_NVML_STATE, default /var/lib/ai-l1-fake/nvml-state), which
 * the library reads over the scenario (last definition wins).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef void *nvmlDevice_t;
typedef void *nvmlGpuInstance_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
    nvmlDevice_t device;
    unsigned int id, profileId, start, size;
} nvmlGpuInstanceInfo_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int);
int nvmlSystemGetDriverVersion(char *, unsigned int);
int nvmlSystemGetCudaDriverVersion_v2(int *);
int nvmlDeviceGetCount_v2(unsigned int *);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetSerial(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
int nvmlDeviceGetTemperature(nvmlDevice_t, int, unsigned int *);
int nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int *);
int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t, unsigned int *);
int nvmlDeviceGetPersistenceMode(nvmlDevice_t, int *);
int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t, int *, int *);
int nvmlDeviceGetMigMode(nvmlDevice_t, unsigned int *, unsigned int *);
int nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t, unsigned int, nvmlGpuInstanceProfileInfo_v2_t *);
int nvmlDeviceGetGpuInstances(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *, unsigned int *);
int nvmlGpuInstanceGetInfo(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t *);
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);

static char g_driver[80];
static int g_cuda;
static int noheader, nounits;

static const char *NA = "[N/A]";

/* Formats one field of one GPU into out; returns 0 when the field is unknown. */
static int field(nvmlDevice_t d, unsigned int idx, unsigned int count, const char *f, char *out, size_t n)
{
    char s[128];
    unsigned int u, u2;
    int a, b;
    nvmlPciInfo_t pci;
    nvmlMemory_t m;
    const char *mib = nounits ? "" : " MiB";
    const char *w = nounits ? "" : " W";
    if (!strcmp(f, "index"))
        snprintf(out, n, "%u", idx);
    else if (!strcmp(f, "count"))
        snprintf(out, n, "%u", count);
    else if (!strcmp(f, "name") || !strcmp(f, "gpu_name"))
        snprintf(out, n, "%s", nvmlDeviceGetName(d, s, sizeof s) ? NA : s);
    else if (!strcmp(f, "uuid") || !strcmp(f, "gpu_uuid"))
        snprintf(out, n, "%s", nvmlDeviceGetUUID(d, s, sizeof s) ? NA : s);
    else if (!strcmp(f, "serial"))
        snprintf(out, n, "%s", nvmlDeviceGetSerial(d, s, sizeof s) ? NA : s);
    else if (!strcmp(f, "pci.bus_id") || !strcmp(f, "gpu_bus_id"))
        snprintf(out, n, "%s", nvmlDeviceGetPciInfo_v3(d, &pci) ? NA : pci.busId);
    else if (!strcmp(f, "pci.device_id"))
        snprintf(out, n, "%s", nvmlDeviceGetPciInfo_v3(d, &pci) ? NA : (snprintf(s, sizeof s, "0x%08X", pci.pciDeviceId), s));
    else if (!strcmp(f, "driver_version"))
        snprintf(out, n, "%s", g_driver);
    else if (!strncmp(f, "memory.", 7)) {
        if (nvmlDeviceGetMemoryInfo(d, &m)) {
            snprintf(out, n, "%s", NA);
            return 1;
        }
        unsigned long long v = !strcmp(f, "memory.total") ? m.total : !strcmp(f, "memory.used") ? m.used
                             : !strcmp(f, "memory.free")  ? m.free
                                                          : ~0ULL;
        if (v == ~0ULL)
            return 0;
        snprintf(out, n, "%llu%s", v >> 20, mib);
    } else if (!strcmp(f, "temperature.gpu"))
        nvmlDeviceGetTemperature(d, 0, &u) ? snprintf(out, n, "%s", NA) : snprintf(out, n, "%u", u);
    else if (!strcmp(f, "power.draw"))
        nvmlDeviceGetPowerUsage(d, &u) ? snprintf(out, n, "%s", NA) : snprintf(out, n, "%.2f%s", u / 1000.0, w);
    else if (!strcmp(f, "power.limit") || !strcmp(f, "enforced.power.limit"))
        nvmlDeviceGetEnforcedPowerLimit(d, &u) ? snprintf(out, n, "%s", NA)
                                               : snprintf(out, n, "%.2f%s", u / 1000.0, w);
    else if (!strcmp(f, "persistence_mode"))
        snprintf(out, n, "%s", nvmlDeviceGetPersistenceMode(d, &a) ? NA : a ? "Enabled" : "Disabled");
    else if (!strcmp(f, "compute_cap"))
        nvmlDeviceGetCudaComputeCapability(d, &a, &b) ? snprintf(out, n, "%s", NA) : snprintf(out, n, "%d.%d", a, b);
    else if (!strcmp(f, "mig.mode.current") || !strcmp(f, "mig.mode.pending")) {
        if (nvmlDeviceGetMigMode(d, &u, &u2))
            snprintf(out, n, "%s", NA);
        else
            snprintf(out, n, "%s", (f[9] == 'c' ? u : u2) ? "Enabled" : "Disabled");
    } else
        return 0;
    return 1;
}

static const char *unit_of(const char *f)
{
    if (!strncmp(f, "memory.", 7))
        return " [MiB]";
    if (!strncmp(f, "power.", 6) || !strcmp(f, "enforced.power.limit"))
        return " [W]";
    return "";
}

static int query(const char *fields, int only)
{
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    char *list = strdup(fields), *names[64];
    int nf = 0;
    for (char *t = strtok(list, ","); t && nf < 64; t = strtok(NULL, ","))
        names[nf++] = t;
    char buf[256];
    if (!noheader) {
        for (int i = 0; i < nf; i++)
            printf("%s%s%s", i ? ", " : "", names[i], nounits ? "" : unit_of(names[i]));
        printf("\n");
    }
    for (unsigned int g = 0; g < count; g++) {
        if (only >= 0 && (unsigned int)only != g)
            continue;
        nvmlDevice_t d;
        if (nvmlDeviceGetHandleByIndex_v2(g, &d))
            continue;
        for (int i = 0; i < nf; i++) {
            if (!field(d, g, count, names[i], buf, sizeof buf)) {
                fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", names[i]);
                return 2;
            }
            printf("%s%s", i ? ", " : "", buf);
        }
        printf("\n");
    }
    return 0;
}

static void list_gpus(void)
{
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    for (unsigned int g = 0; g < count; g++) {
        nvmlDevice_t d;
        char name[96] = "", uuid[96] = "";
        unsigned int cur = 0, pend = 0;
        if (nvmlDeviceGetHandleByIndex_v2(g, &d))
            continue;
        nvmlDeviceGetName(d, name, sizeof name);
        nvmlDeviceGetUUID(d, uuid, sizeof uuid);
        printf("GPU %u: %s (UUID: %s)\n", g, name, uuid);
        if (nvmlDeviceGetMigMode(d, &cur, &pend) || !cur)
            continue;
        int mig = 0;
        for (unsigned int p = 0; p < 32; p++) {
            nvmlGpuInstanceProfileInfo_v2_t info;
            memset(&info, 0, sizeof info);
            info.version = 0x02000098u;
            if (nvmlDeviceGetGpuInstanceProfileInfoV(d, p, &info))
                continue;
            nvmlGpuInstance_t gis[16];
            unsigned int n = 0;
            if (nvmlDeviceGetGpuInstances(d, info.id, gis, &n))
                continue;
            for (unsigned int k = 0; k < n; k++) {
                nvmlGpuInstanceInfo_t gi;
                nvmlGpuInstanceGetInfo(gis[k], &gi);
                /* MIG UUIDs are derived here; only their shape matters to tools. */
                printf("  %-14s Device %2d: (UUID: MIG-%.8s-%04x-%04x-%04x-%012x)\n", info.name, mig++,
                       uuid + 4, g, gi.id, gi.start, gi.size);
            }
        }
    }
}

static void summary(void)
{
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    printf("+-----------------------------------------------------------------------------------------+\n");
    printf("| NVIDIA-SMI %-16s Driver Version: %-16s CUDA Version: %d.%-10d|\n", g_driver, g_driver,
           g_cuda / 1000, (g_cuda % 1000) / 10);
    printf("|-----------------------------------------+------------------------+----------------------+\n");
    for (unsigned int g = 0; g < count; g++) {
        nvmlDevice_t d;
        char name[96] = "", bus[32] = "", mem[32] = "", pwr[32] = "", tmp[32] = "";
        if (nvmlDeviceGetHandleByIndex_v2(g, &d))
            continue;
        nvmlDeviceGetName(d, name, sizeof name);
        field(d, g, count, "pci.bus_id", bus, sizeof bus);
        field(d, g, count, "memory.total", mem, sizeof mem);
        field(d, g, count, "power.draw", pwr, sizeof pwr);
        field(d, g, count, "temperature.gpu", tmp, sizeof tmp);
        printf("| %3u  %-34s | %-22s | %-20s |\n", g, name, bus, mem);
        printf("| %5sC %-32s |                        |                      |\n", tmp, pwr);
    }
    printf("+-----------------------------------------------------------------------------------------+\n");
}

/* ---- state file: appended key=value lines, read by the library over the scenario ---- */
static FILE *g_state;

static int state_open(void)
{
    if (g_state)
        return 0;
    const char *p = getenv("AI_L1_FAKE_NVML_STATE");
    if (!p || !*p) {
        p = "/var/lib/ai-l1-fake/nvml-state";
        mkdir("/var/lib/ai-l1-fake", 0755);
    }
    g_state = fopen(p, "a");
    if (!g_state) {
        fprintf(stderr, "fake nvidia-smi: cannot write the state file %s\n", p);
        return -1;
    }
    return 0;
}

static void state_close(void)
{
    if (g_state)
        fclose(g_state);
    g_state = NULL;
}

#define MAXP 32
#define MAXGI 16
struct gpu_mig {
    nvmlDevice_t d;
    char bus[32], uuid[96];
    unsigned int cur, pend;
    int supported, nprocs;
    nvmlGpuInstanceProfileInfo_v2_t prof[MAXP];
    int have[MAXP];
    /* GPU instances: profile index, id, start, size */
    int n;
    int gp[MAXGI];
    unsigned int gid[MAXGI], gstart[MAXGI], gsize[MAXGI];
};

static int mig_read(unsigned int g, struct gpu_mig *m)
{
    memset(m, 0, sizeof *m);
    if (nvmlDeviceGetHandleByIndex_v2(g, &m->d))
        return -1;
    nvmlPciInfo_t pci;
    if (!nvmlDeviceGetPciInfo_v3(m->d, &pci))
        snprintf(m->bus, sizeof m->bus, "%s", pci.busId);
    nvmlDeviceGetUUID(m->d, m->uuid, sizeof m->uuid);
    m->supported = nvmlDeviceGetMigMode(m->d, &m->cur, &m->pend) == 0;
    unsigned int np = 0;
    nvmlDeviceGetComputeRunningProcesses_v3(m->d, &np, NULL);
    m->nprocs = (int)np;
    if (!m->supported)
        return 0;
    for (unsigned int p = 0; p < MAXP; p++) {
        m->prof[p].version = 0x02000098u;
        m->have[p] = nvmlDeviceGetGpuInstanceProfileInfoV(m->d, p, &m->prof[p]) == 0;
        if (!m->have[p] || !m->cur)
            continue;
        nvmlGpuInstance_t gis[MAXGI];
        unsigned int k = 0;
        if (nvmlDeviceGetGpuInstances(m->d, m->prof[p].id, gis, &k))
            continue;
        for (unsigned int j = 0; j < k && m->n < MAXGI; j++) {
            nvmlGpuInstanceInfo_t gi;
            nvmlGpuInstanceGetInfo(gis[j], &gi);
            m->gp[m->n] = (int)p;
            m->gid[m->n] = gi.id;
            m->gstart[m->n] = gi.start;
            m->gsize[m->n] = gi.size;
            m->n++;
        }
    }
    return 0;
}

/* Rewrites every instance slot of GPU g (empty values remove scenario defaults). */
static void mig_write(unsigned int g, const struct gpu_mig *m)
{
    for (int k = 0; k < MAXGI; k++) {
        if (k < m->n)
            fprintf(g_state, "gpu.%u.mig_instance.%d=%d,%u,%u,%u\n", g, k, m->gp[k], m->gid[k], m->gstart[k],
                    m->gsize[k]);
        else
            fprintf(g_state, "gpu.%u.mig_instance.%d=\n", g, k);
    }
}

static int selected(const char *sel, unsigned int g)
{
    if (!sel)
        return 1;
    char *list = strdup(sel);
    int hit = 0;
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ","))
        hit |= (unsigned int)atoi(t) == g;
    free(list);
    return hit;
}

static int set_mig_mode(const char *sel, int on)
{
    unsigned int count = 0;
    int rc = 0;
    nvmlDeviceGetCount_v2(&count);
    if (state_open())
        return 2;
    for (unsigned int g = 0; g < count; g++) {
        struct gpu_mig m;
        if (!selected(sel, g) || mig_read(g, &m))
            continue;
        if (!m.supported) {
            printf("Unable to %s MIG Mode for GPU %s: Not Supported\n", on ? "enable" : "disable", m.bus);
            rc = 3;
            continue;
        }
        if (m.nprocs || (!on && m.n)) {
            printf("Unable to %s MIG Mode for GPU %s: In use by another client\n", on ? "enable" : "disable", m.bus);
            rc = 19;
            continue;
        }
        /* No clients: the fake applies the mode at once (no reset pending). */
        fprintf(g_state, "gpu.%u.mig_mode=%d,%d\n", g, on, on);
        printf("%s MIG Mode for GPU %s\n", on ? "Enabled" : "Disabled", m.bus);
    }
    printf(rc ? "Terminating early due to previous errors.\n" : "All done.\n");
    return rc;
}

static void rule(int w)
{
    printf("+");
    for (int i = 0; i < w; i++)
        printf("-");
    printf("+\n");
}

static int mig_list(const char *sel, int profiles, int cis)
{
    unsigned int count = 0, rows = 0, mig = 0;
    nvmlDeviceGetCount_v2(&count);
    for (unsigned int g = 0; g < count; g++) {
        struct gpu_mig m;
        if (selected(sel, g) && !mig_read(g, &m) && m.supported && m.cur) {
            mig++;
            rows += profiles ? 1 : (unsigned int)m.n;
        }
    }
    if (!mig) {
        printf("No MIG-enabled devices found.\n");
        return 6;
    }
    if (!rows) {
        printf("No %s instances found: Not Found\n", cis ? "compute" : "GPU");
        return 6;
    }
    int w = profiles ? 77 : cis ? 70 : 55;
    rule(w);
    if (profiles) {
        printf("| %-75s |\n", "GPU instance profiles:");
        printf("| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |\n");
        printf("|                              Free/Total   GiB              CE    JPEG  OFA  |\n");
    } else if (cis) {
        printf("| %-68s |\n", "Compute instances:");
        printf("| GPU     GPU       Name             Profile   Instance   Placement  |\n");
        printf("|       Instance                       ID        ID       Start:Size |\n");
        printf("|         ID                                                         |\n");
    } else {
        printf("| %-53s |\n", "GPU instances:");
        printf("| GPU   Name             Profile  Instance   Placement  |\n");
        printf("|                          ID       ID       Start:Size |\n");
    }
    printf("|");
    for (int i = 0; i < w; i++)
        printf("=");
    printf("|\n");
    for (unsigned int g = 0; g < count; g++) {
        struct gpu_mig m;
        if (!selected(sel, g) || mig_read(g, &m) || !m.supported || !m.cur)
            continue;
        if (profiles) {
            for (int p = 0; p < MAXP; p++) {
                if (!m.have[p])
                    continue;
                unsigned int used = 0;
                for (int k = 0; k < m.n; k++)
                    used += m.gp[k] == p;
                char inst[16], name[64];
                snprintf(inst, sizeof inst, "%u/%u", m.prof[p].instanceCount - used, m.prof[p].instanceCount);
                snprintf(name, sizeof name, "%s", m.prof[p].name);
                printf("| %3u  %-16s %3u    %-9s  %6.2f      No     %-4u  0     0   |\n", g, name, m.prof[p].id, inst,
                       m.prof[p].memorySizeMB / 1024.0, m.prof[p].multiprocessorCount);
                printf("|                                                            %-4u  0     0   |\n",
                       m.prof[p].copyEngineCount);
                printf("+");
                for (int i = 0; i < w; i++)
                    printf("-");
                printf("+\n");
            }
            continue;
        }
        for (int k = 0; k < m.n; k++) {
            char pl[16];
            snprintf(pl, sizeof pl, "%u:%u", m.gstart[k], m.gsize[k]);
            if (cis)
                printf("| %3u %6u       %-16s %4u %9u       %-11s|\n", g, m.gid[k], m.prof[m.gp[k]].name, 0u, 0u, pl);
            else
                printf("| %3u  %-16s %5u %9u         %-8s|\n", g, m.prof[m.gp[k]].name, m.prof[m.gp[k]].id,
                       m.gid[k], pl);
        }
    }
    if (!profiles)
        rule(w);
    return 0;
}

/* A100 placement rules: a profile of s slices occupies size = 1, 2, 4, 4 or 8 memory slices
 * starting at a multiple of size, with start + s <= 7 compute slices. */
static int place(const struct gpu_mig *m, unsigned int slices, unsigned int *start, unsigned int *size)
{
    unsigned int sz = slices <= 2 ? slices : slices <= 4 ? 4 : 8;
    for (unsigned int st = 0; st + slices <= 7; st += sz) {
        int free_ = 1;
        for (int k = 0; k < m->n && free_; k++)
            free_ = st + sz <= m->gstart[k] || m->gstart[k] + m->gsize[k] <= st;
        if (free_) {
            *start = st;
            *size = sz;
            return 0;
        }
    }
    return -1;
}

static int mig_create(const char *sel, const char *list, int with_ci)
{
    unsigned int count = 0;
    int rc = 0;
    nvmlDeviceGetCount_v2(&count);
    if (state_open())
        return 2;
    for (unsigned int g = 0; g < count && !rc; g++) {
        struct gpu_mig m;
        if (!selected(sel, g) || mig_read(g, &m))
            continue;
        if (!m.supported || !m.cur) {
            printf("Unable to create a GPU instance on GPU %3u: MIG mode is not enabled\n", g);
            rc = 6;
            break;
        }
        char *items = strdup(list);
        for (char *t = strtok(items, ","); t && !rc; t = strtok(NULL, ",")) {
            int p = -1;
            const char *name = strncmp(t, "MIG ", 4) ? t : t + 4;
            for (int q = 0; q < MAXP && p < 0; q++) {
                if (!m.have[q])
                    continue;
                char id[16];
                snprintf(id, sizeof id, "%u", m.prof[q].id);
                if (!strcmp(t, id) || !strcmp(name, m.prof[q].name + 4))
                    p = q;
            }
            if (p < 0) {
                printf("Unable to create a GPU instance on GPU %3u using profile %s: Not Found\n", g, t);
                rc = 6;
                break;
            }
            unsigned int used = 0, id = 1, start, size;
            for (int k = 0; k < m.n; k++)
                used += m.gp[k] == p;
            for (int again = 1; again;) {
                again = 0;
                for (int k = 0; k < m.n; k++)
                    if (m.gid[k] == id) {
                        id++;
                        again = 1;
                    }
            }
            if (used >= m.prof[p].instanceCount || m.n >= MAXGI || place(&m, m.prof[p].sliceCount, &start, &size)) {
                printf("Unable to create a GPU instance on GPU %3u using profile %s: Insufficient Resources\n", g,
                       m.prof[p].name);
                rc = 2;
                break;
            }
            m.gp[m.n] = p;
            m.gid[m.n] = id;
            m.gstart[m.n] = start;
            m.gsize[m.n] = size;
            m.n++;
            printf("Successfully created GPU instance ID %2u on GPU %3u using profile %s (ID %2u)\n", id, g,
                   m.prof[p].name, m.prof[p].id);
            if (with_ci)
                printf("Successfully created compute instance ID  0 on GPU %3u GPU instance ID %2u using profile "
                       "%s (ID  0)\n", g, id, m.prof[p].name);
        }
        free(items);
        mig_write(g, &m); /* what was created before an error stays, as on the real driver */
    }
    return rc;
}

static int mig_destroy(const char *sel, const char *gi_sel, int gis)
{
    unsigned int count = 0, done = 0;
    nvmlDeviceGetCount_v2(&count);
    if (gis && state_open())
        return 2;
    for (unsigned int g = 0; g < count; g++) {
        struct gpu_mig m, keep;
        if (!selected(sel, g) || mig_read(g, &m) || !m.supported || !m.cur)
            continue;
        keep = m;
        keep.n = 0;
        for (int k = 0; k < m.n; k++) {
            if (!selected(gi_sel, m.gid[k])) {
                keep.gp[keep.n] = m.gp[k];
                keep.gid[keep.n] = m.gid[k];
                keep.gstart[keep.n] = m.gstart[k];
                keep.gsize[keep.n] = m.gsize[k];
                keep.n++;
                continue;
            }
            done++;
            if (gis)
                printf("Successfully destroyed GPU instance ID %2u from GPU %3u\n", m.gid[k], g);
            else
                printf("Successfully destroyed compute instance ID  0 from GPU %3u GPU instance ID %2u\n", g,
                       m.gid[k]);
        }
        if (gis && keep.n != m.n)
            mig_write(g, &keep);
    }
    if (!done) {
        printf("No %s instances found: Not Found\n", gis ? "GPU" : "compute");
        return 6;
    }
    return 0;
}

static int mig_main(int argc, char **argv)
{
    const char *sel = NULL, *gi_sel = NULL, *create = NULL;
    int op = 0, with_ci = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-i") || !strcmp(a, "--id")) && i + 1 < argc)
            sel = argv[++i];
        else if ((!strcmp(a, "-gi") || !strcmp(a, "--gpu-instance-id")) && i + 1 < argc)
            gi_sel = argv[++i];
        else if (!strcmp(a, "-lgip") || !strcmp(a, "-lgi") || !strcmp(a, "-lci") || !strcmp(a, "-dgi") ||
                 !strcmp(a, "-dci"))
            op = a[1] == 'l' ? (a[3] == 'i' && a[4] == 'p' ? 'P' : a[2] == 'c' ? 'C' : 'L') : a[2] == 'g' ? 'G' : 'D';
        else if (!strcmp(a, "-cgi") && i + 1 < argc) {
            op = 'c';
            create = argv[++i];
        } else if (!strcmp(a, "-C"))
            with_ci = 1;
        else {
            fprintf(stderr, "fake nvidia-smi mig: unsupported argument '%s'\n", a);
            return 2;
        }
    }
    int rc;
    switch (op) {
    case 'P': rc = mig_list(sel, 1, 0); break;
    case 'L': rc = mig_list(sel, 0, 0); break;
    case 'C': rc = mig_list(sel, 0, 1); break;
    case 'c': rc = mig_create(sel, create, with_ci); break;
    case 'G': rc = mig_destroy(sel, gi_sel, 1); break;
    case 'D': rc = mig_destroy(sel, gi_sel, 0); break;
    default:
        fprintf(stderr, "fake nvidia-smi mig: give one of -lgip -lgi -lci -cgi -dci -dgi\n");
        rc = 2;
    }
    state_close();
    return rc;
}

static int query_apps(const char *fields)
{
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    char *list = strdup(fields), *names[16];
    int nf = 0;
    for (char *t = strtok(list, ","); t && nf < 16; t = strtok(NULL, ","))
        names[nf++] = t;
    if (!noheader) {
        for (int i = 0; i < nf; i++)
            printf("%s%s%s", i ? ", " : "", names[i], !nounits && !strcmp(names[i], "used_memory") ? " [MiB]" : "");
        printf("\n");
    }
    for (unsigned int g = 0; g < count; g++) {
        nvmlDevice_t d;
        nvmlProcessInfo_t p[16];
        unsigned int n = 16;
        char uuid[96] = "", s[128];
        nvmlPciInfo_t pci;
        if (nvmlDeviceGetHandleByIndex_v2(g, &d) || nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p))
            continue;
        nvmlDeviceGetUUID(d, uuid, sizeof uuid);
        nvmlDeviceGetPciInfo_v3(d, &pci);
        for (unsigned int k = 0; k < n; k++) {
            for (int i = 0; i < nf; i++) {
                const char *f = names[i];
                if (!strcmp(f, "pid"))
                    snprintf(s, sizeof s, "%u", p[k].pid);
                else if (!strcmp(f, "process_name") || !strcmp(f, "name")) {
                    char path[64];
                    snprintf(path, sizeof path, "/proc/%u/comm", p[k].pid);
                    FILE *c = fopen(path, "r");
                    if (!c || !fgets(s, sizeof s, c))
                        snprintf(s, sizeof s, "[Not Found]");
                    if (c)
                        fclose(c);
                    s[strcspn(s, "\n")] = 0;
                } else if (!strcmp(f, "gpu_uuid"))
                    snprintf(s, sizeof s, "%s", uuid);
                else if (!strcmp(f, "gpu_bus_id"))
                    snprintf(s, sizeof s, "%s", pci.busId);
                else if (!strcmp(f, "used_memory") || !strcmp(f, "used_gpu_memory"))
                    snprintf(s, sizeof s, "%llu%s", p[k].usedGpuMemory >> 20, nounits ? "" : " MiB");
                else {
                    fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", f);
                    return 2;
                }
                printf("%s%s", i ? ", " : "", s);
            }
            printf("\n");
        }
    }
    return 0;
}

/* `nvidia-smi topo -m`: the capture the hardware profile installed (tests/hardware/nvml/topology),
 * as the real tool's matrix comes from PCIe/NUMA facts that NVML alone does not give here. */
static int topo_main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "-m") && strcmp(argv[2], "--matrix"))) {
        fprintf(stderr, "fake nvidia-smi: only 'topo -m' is simulated\n");
        return 2;
    }
    const char *path = getenv("AI_L1_FAKE_NVSMI_TOPO");
    if (!path || !*path)
        path = "/etc/ai-l1-fake/nvidia-smi-topo-m.txt";
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fake nvidia-smi: no topology capture at %s (the hardware profile installs it)\n", path);
        return 2;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stdout);
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    int r = nvmlInit_v2();
    if (r == 9 || r == 12) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
        return 9;
    }
    if (r) {
        printf("Failed to initialize NVML: %s\n", nvmlErrorString(r));
        return r;
    }
    nvmlSystemGetDriverVersion(g_driver, sizeof g_driver);
    nvmlSystemGetCudaDriverVersion_v2(&g_cuda);
    if (argc > 1 && !strcmp(argv[1], "topo")) {
        r = topo_main(argc, argv);
        nvmlShutdown();
        return r;
    }
    if (argc > 1 && !strcmp(argv[1], "mig")) {
        r = mig_main(argc, argv);
        nvmlShutdown();
        return r;
    }
    const char *q = NULL, *apps = NULL, *sel = NULL;
    int only = -1, list = 0, version = 0, csv = 0, mig_mode = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-L") || !strcmp(a, "--list-gpus"))
            list = 1;
        else if (!strcmp(a, "--version"))
            version = 1;
        else if (!strncmp(a, "--query-gpu=", 12))
            q = a + 12;
        else if (!strcmp(a, "--query-gpu") && i + 1 < argc)
            q = argv[++i];
        else if (!strncmp(a, "--query-compute-apps=", 21))
            apps = a + 21;
        else if ((!strcmp(a, "-mig") || !strcmp(a, "--multi-instance-gpu")) && i + 1 < argc)
            mig_mode = atoi(argv[++i]);
        else if (!strncmp(a, "--format=", 9) || (!strcmp(a, "--format") && i + 1 < argc)) {
            const char *f = a[8] == '=' ? a + 9 : argv[++i];
            csv = strstr(f, "csv") != NULL;
            noheader = strstr(f, "noheader") != NULL;
            nounits = strstr(f, "nounits") != NULL;
        } else if (!strncmp(a, "--id=", 5))
            only = atoi(a + 5);
        else if (!strcmp(a, "-i") && i + 1 < argc) {
            sel = argv[++i];
            only = atoi(sel);
        }
        else {
            fprintf(stderr, "fake nvidia-smi: unsupported argument '%s'\n", a);
            return 2;
        }
    }
    if (version) {
        printf("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
               "CUDA Version        : %d.%d\n",
               g_driver, g_driver, g_driver, g_cuda / 1000, (g_cuda % 1000) / 10);
    } else if (mig_mode >= 0) {
        r = set_mig_mode(sel, mig_mode);
        state_close();
    } else if (apps) {
        if (!csv) {
            fprintf(stderr, "Missing --format=csv\n");
            return 2;
        }
        r = query_apps(apps);
    } else if (q) {
        if (!csv) {
            fprintf(stderr, "Missing --format=csv\n");
            return 2;
        }
        r = query(q, only);
    } else if (list)
        list_gpus();
    else
        summary();
    nvmlShutdown();
    return r;
}
