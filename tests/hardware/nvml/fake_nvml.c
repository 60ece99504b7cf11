/*
 * Fake libnvidia-ml.so.1 for tests and the lab.
 *
 * It exports the NVML entry points that pynvml (nvidia-ml-py) and our fake
 * nvidia-smi call, with the real ABI (struct layouts and error codes from
 * nvml.h as mirrored in pynvml.py), and answers from a scenario file:
 * $AI_L1_FAKE_NVML_SCENARIO, default /etc/ai-l1-fake/nvml-scenario.
 * The format is described in tests/hardware/nvml/README.md.
 *
 * The scenario is read at nvmlInit time, so one process sees one consistent
 * machine. Then the state file ($AI_L1_FAKE_NVML_STATE, default
 * /var/lib/ai-l1-fake/nvml-state; same format, last definition wins) is read
 * over it: the fake nvidia-smi appends MIG mode and GPU instance changes there,
 * so `nvidia-smi -mig 1` and `nvidia-smi mig -cgi` persist across processes.
 *
 * Events (nvmlEventSet*): the one exception to "read once at nvmlInit". An
 * event set re-reads the scenario and state files (and the kernel log named
 * by `xid_kernel_log`) each time nvmlEventSetWait polls, so an XID appended
 * while a caller waits reaches it as an nvmlEventTypeXidCriticalError event.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_KV 4096
#define MAX_PROFILES 32
#define MAX_INSTANCES 16
#define MAX_LINKS 36
#define MAX_PROCS 16

/* ---- ABI structs (layouts as in nvml.h / pynvml.py) ---- */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 0x02000028u

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define NVML_TEMPERATURE_V1 0x100000Cu

typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
#define NVML_GI_PROFILE_INFO_V2 0x02000098u

struct fake_gpu;
typedef struct fake_gpu *nvmlDevice_t;

typedef struct {
    unsigned int start, size;
} nvmlGpuInstancePlacement_t;

struct fake_gi;
typedef struct fake_gi *nvmlGpuInstance_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

/* ---- scenario model ---- */
struct kv {
    char *key;
    char *val;
};

struct mig_profile {
    int present;
    char name[96];
    unsigned int id, slices, instances;
    unsigned long long memory_mb;
};

struct fake_gi {
    struct fake_gpu *gpu;
    int profile_index;
    unsigned int gi_id, start, size;
};

struct fake_gpu {
    int index;
    char name[96];
    char uuid[96];
    char serial[32];
    char vbios[32];
    char pci_bus_id[32];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    unsigned long long memory_total_mib, memory_used_mib;
    int temperature_c;
    unsigned int power_usage_mw, power_limit_mw;
    int persistence_mode;
    int cc_major, cc_minor;
    int mig_supported, mig_current, mig_pending;
    unsigned int mig_max_devices;
    struct mig_profile profiles[MAX_PROFILES];
    struct fake_gi gis[MAX_INSTANCES];
    int n_gis;
    unsigned int proc_pid[MAX_PROCS];
    unsigned long long proc_used_mib[MAX_PROCS];
    int n_procs;
    int nvlink_links, nvlink_active, nvlink_remote_type;
    unsigned long long ecc_sbe_volatile, ecc_sbe_aggregate, ecc_dbe_volatile, ecc_dbe_aggregate;
    unsigned int rr_correctable, rr_uncorrectable, rr_pending, rr_failure;
    unsigned int retired_sbe, retired_dbe, retired_pending;
    unsigned long long event_types; /* nvmlDeviceGetSupportedEventTypes */
    unsigned int arch;              /* nvmlDeviceArchitecture_t */
};

/* A MIG device: the fake's GPU instances each hold one compute instance (ID 0)
 * spanning the whole instance, as `nvidia-smi mig -cgi ... -C` creates them. Its
 * handle (an nvmlDevice_t) and its compute instance handle both point here. */
struct fake_mig {
    struct fake_gpu *gpu;
    struct fake_gi *gi;
    unsigned int index;      /* on its GPU, in the order of `nvidia-smi -L` */
    unsigned int ci_profile; /* NVML compute instance profile index (= its ID) */
    unsigned int slices;
    unsigned long long memory_mb;
    char uuid[96];
    char name[200];
};
typedef struct fake_mig *nvmlComputeInstance_t;

static struct kv g_kv[MAX_KV];
static int g_nkv;
static int g_init_refcount;
static int g_loaded;
static nvmlReturn_t g_init_error;
static char g_driver_version[80];
static char g_nvml_version[80];
static int g_cuda_version;
static int g_count;
static struct fake_gpu g_gpus[MAX_GPUS];
static char g_p2p_nvlink[1024];
static int g_topology_level;
static struct fake_mig g_migs[MAX_GPUS][MAX_INSTANCES];
static int g_nmigs[MAX_GPUS];
static char g_scenario_path[4096], g_state_path[4096]; /* what nvmlInit read; events re-read them */
static unsigned int g_generation;                        /* counts loads (kernel log cache) */

static void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fake NVML: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Values may carry \xNN escapes so scenarios can hold garbled bytes. */
static char *unescape(const char *s)
{
    char *out = malloc(strlen(s) + 1), *o = out;
    while (*s) {
        if (s[0] == '\\' && s[1] == 'x' && isxdigit((unsigned char)s[2]) && isxdigit((unsigned char)s[3])) {
            char hex[3] = {s[2], s[3], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            s += 4;
        } else {
            *o++ = *s++;
        }
    }
    *o = 0;
    return out;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

static void free_kv(void)
{
    for (int i = 0; i < g_nkv; i++) {
        free(g_kv[i].key);
        free(g_kv[i].val);
    }
    g_nkv = 0;
}

/* Appends the key=value lines of a scenario-format file to kv[*n..MAX_KV). With
 * whole_lines, a last line without its newline (an append under way) is left out. */
static int read_kv(const char *path, struct kv *kv, int *n, int whole_lines)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    while (fgets(line, sizeof line, f) && *n < MAX_KV) {
        if (whole_lines && !strchr(line, '\n') && feof(f))
            break;
        char *l = trim(line);
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        if (!eq)
            continue;
        *eq = 0;
        kv[*n].key = strdup(trim(l));
        kv[*n].val = unescape(trim(eq + 1));
        (*n)++;
    }
    fclose(f);
    return 0;
}

static int read_scenario(const char *path)
{
    return read_kv(path, g_kv, &g_nkv, 0);
}

static const char *kv_find(const struct kv *kv, int n, const char *key)
{
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(kv[i].key, key) == 0)
            return kv[i].val;
    return NULL;
}

/* Last definition wins; "gpu.N.key" beats "gpu.*.key". */
static const char *lookup(const char *key)
{
    return kv_find(g_kv, g_nkv, key);
}

static const char *gpu_lookup(int idx, const char *key)
{
    char k[256];
    snprintf(k, sizeof k, "gpu.%d.%s", idx, key);
    const char *v = lookup(k);
    if (v)
        return v;
    snprintf(k, sizeof k, "gpu.*.%s", key);
    return lookup(k);
}

static long long gpu_num(int idx, const char *key, long long dflt)
{
    const char *v = gpu_lookup(idx, key);
    return v && *v ? strtoll(v, NULL, 0) : dflt;
}

static void gpu_str(int idx, const char *key, char *dst, size_t n, const char *dflt)
{
    const char *v = gpu_lookup(idx, key);
    snprintf(dst, n, "%s", v ? v : dflt);
}

static const struct {
    const char *name;
    int code;
} error_names[] = {
    {"SUCCESS", 0},
    {"UNINITIALIZED", 1},
    {"INVALID_ARGUMENT", 2},
    {"NOT_SUPPORTED", 3},
    {"NO_PERMISSION", 4},
    {"ALREADY_INITIALIZED", 5},
    {"NOT_FOUND", 6},
    {"INSUFFICIENT_SIZE", 7},
    {"INSUFFICIENT_POWER", 8},
    {"DRIVER_NOT_LOADED", 9},
    {"TIMEOUT", 10},
    {"IRQ_ISSUE", 11},
    {"LIBRARY_NOT_FOUND", 12},
    {"FUNCTION_NOT_FOUND", 13},
    {"CORRUPTED_INFOROM", 14},
    {"GPU_IS_LOST", 15},
    {"RESET_REQUIRED", 16},
    {"OPERATING_SYSTEM", 17},
    {"LIB_RM_VERSION_MISMATCH", 18},
    {"IN_USE", 19},
    {"MEMORY", 20},
    {"NO_DATA", 21},
    {"ARGUMENT_VERSION_MISMATCH", 25},
    {"UNKNOWN", 999},
};

static int parse_error(const char *v)
{
    if (!v || !*v)
        return 0;
    if (isdigit((unsigned char)*v))
        return atoi(v);
    if (strncmp(v, "NVML_ERROR_", 11) == 0)
        v += 11;
    for (size_t i = 0; i < sizeof error_names / sizeof *error_names; i++)
        if (strcmp(error_names[i].name, v) == 0)
            return error_names[i].code;
    warn("unknown error name '%s', using UNKNOWN", v);
    return NVML_ERROR_UNKNOWN;
}

/* Per-call error injection: "error.<fn>=CODE" or "gpu.N.error.<fn>=CODE". */
static int forced(const struct fake_gpu *g, const char *fn)
{
    char k[256];
    snprintf(k, sizeof k, "error.%s", fn);
    if (g)
        return parse_error(gpu_lookup(g->index, k));
    return parse_error(lookup(k));
}

static void parse_pci(struct fake_gpu *g)
{
    unsigned int dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(g->pci_bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        warn("gpu %d: bad pci_bus_id '%s'", g->index, g->pci_bus_id);
    g->domain = dom;
    g->bus = bus;
    g->device = dev;
}

/* nvmlDeviceArchitecture_t: the `architecture` key (name or number), else from the
 * compute capability. */
static unsigned int arch_of(int i, int major, int minor)
{
    static const struct {
        const char *name;
        unsigned int value;
    } names[] = {{"kepler", 2}, {"maxwell", 3}, {"pascal", 4}, {"volta", 5}, {"turing", 6},
                 {"ampere", 7}, {"ada", 8}, {"hopper", 9}, {"blackwell", 10}};
    const char *v = gpu_lookup(i, "architecture");
    if (v && *v) {
        if (isdigit((unsigned char)*v))
            return (unsigned int)strtoul(v, NULL, 0);
        for (size_t k = 0; k < sizeof names / sizeof *names; k++)
            if (strcasecmp(v, names[k].name) == 0)
                return names[k].value;
        warn("gpu %d: unknown architecture '%s'", i, v);
        return 0xFFFFFFFFu;
    }
    switch (major) {
    case 3: return 2;
    case 5: return 3;
    case 6: return 4;
    case 7: return minor >= 5 ? 6 : 5;
    case 8: return minor == 9 ? 8 : 7;
    case 9: return 9;
    case 10:
    case 12: return 10;
    default: return 0xFFFFFFFFu; /* NVML_DEVICE_ARCH_UNKNOWN */
    }
}

/* NVML compute instance profile index <-> compute slices (nvml.h). */
static const unsigned int ci_profile_slices[] = {1, 2, 3, 4, 7, 8, 6, 1, 7};
#define CI_PROFILE_COUNT 9

static int ci_profile_of_slices(unsigned int slices)
{
    for (int p = 0; p < 7; p++)
        if (ci_profile_slices[p] == slices)
            return p;
    return -1;
}

/* MIG devices of a GPU with MIG on: one per GPU instance, in the order `nvidia-smi -L`
 * lists them (by profile index, then instance), with the UUIDs it prints. */
static void build_migs(struct fake_gpu *g)
{
    int i = g->index;
    g_nmigs[i] = 0;
    if (!g->mig_supported || !g->mig_current)
        return;
    const char *u = strlen(g->uuid) >= 4 ? g->uuid + 4 : "";
    for (int p = 0; p < MAX_PROFILES; p++) {
        if (!g->profiles[p].present)
            continue;
        for (int k = 0; k < g->n_gis && g_nmigs[i] < MAX_INSTANCES; k++) {
            struct fake_gi *gi = &g->gis[k];
            struct mig_profile *mp = &g->profiles[gi->profile_index];
            if (!mp->present || mp->id != g->profiles[p].id)
                continue;
            struct fake_mig *m = &g_migs[i][g_nmigs[i]];
            memset(m, 0, sizeof *m);
            m->gpu = g;
            m->gi = gi;
            m->index = (unsigned int)g_nmigs[i];
            m->slices = mp->slices;
            m->memory_mb = mp->memory_mb;
            int cp = ci_profile_of_slices(mp->slices);
            m->ci_profile = cp < 0 ? 0 : (unsigned int)cp;
            snprintf(m->uuid, sizeof m->uuid, "MIG-%.8s-%04x-%04x-%04x-%012x", u, (unsigned int)i, gi->gi_id,
                     gi->start, gi->size);
            snprintf(m->name, sizeof m->name, "%s %s", g->name, mp->name);
            g_nmigs[i]++;
        }
    }
}

/* A MIG device (or compute instance) handle of the loaded scenario, else NULL. */
static struct fake_mig *as_mig(const void *h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_migs;
    if (p < base || p >= base + sizeof g_migs || (p - base) % sizeof(struct fake_mig))
        return NULL;
    size_t flat = (p - base) / sizeof(struct fake_mig);
    size_t gpu = flat / MAX_INSTANCES, k = flat % MAX_INSTANCES;
    if (gpu >= (size_t)g_count || k >= (size_t)g_nmigs[gpu])
        return NULL;
    return &g_migs[gpu][k];
}

static void load_gpu(int i)
{
    struct fake_gpu *g = &g_gpus[i];
    char buf[256], def[96];
    memset(g, 0, sizeof *g);
    g->index = i;
    gpu_str(i, "name", g->name, sizeof g->name, "NVIDIA Fake GPU");
    snprintf(def, sizeof def, "GPU-00000000-0000-0000-0000-%012d", i);
    gpu_str(i, "uuid", g->uuid, sizeof g->uuid, def);
    snprintf(def, sizeof def, "13240000%05d", i);
    gpu_str(i, "serial", g->serial, sizeof g->serial, def);
    /* An A100 SXM4 80GB's VBIOS as nvidia-smi -q prints it. */
    gpu_str(i, "vbios_version", g->vbios, sizeof g->vbios, "92.00.45.00.03");
    snprintf(def, sizeof def, "00000000:%02X:00.0", 0x10 + i);
    gpu_str(i, "pci_bus_id", g->pci_bus_id, sizeof g->pci_bus_id, def);
    parse_pci(g);
    g->pci_device_id = (unsigned int)gpu_num(i, "pci_device_id", 0x20B210DE);
    g->pci_subsystem_id = (unsigned int)gpu_num(i, "pci_subsystem_id", 0x147F10DE);
    g->memory_total_mib = (unsigned long long)gpu_num(i, "memory_total_mib", 81920);
    g->memory_used_mib = (unsigned long long)gpu_num(i, "memory_used_mib", 0);
    g->temperature_c = (int)gpu_num(i, "temperature_c", 30);
    g->power_usage_mw = (unsigned int)gpu_num(i, "power_usage_mw", 60000);
    g->power_limit_mw = (unsigned int)gpu_num(i, "power_limit_mw", 400000);
    g->persistence_mode = (int)gpu_num(i, "persistence_mode", 1);
    gpu_str(i, "compute_capability", buf, sizeof buf, "8.0");
    if (sscanf(buf, "%d.%d", &g->cc_major, &g->cc_minor) != 2)
        warn("gpu %d: bad compute_capability '%s'", i, buf);

    /* mig_mode=current,pending; absent means the GPU is not MIG capable. */
    const char *mm = gpu_lookup(i, "mig_mode");
    if (mm && *mm) {
        g->mig_supported = 1;
        sscanf(mm, "%d,%d", &g->mig_current, &g->mig_pending);
    }
    g->mig_max_devices = (unsigned int)gpu_num(i, "mig_max_devices", g->mig_supported ? 7 : 0);
    for (int p = 0; p < MAX_PROFILES; p++) {
        snprintf(buf, sizeof buf, "mig_profile.%d", p);
        const char *v = gpu_lookup(i, buf);
        if (!v || !*v)
            continue;
        struct mig_profile *mp = &g->profiles[p];
        /* name,id,slices,instances,memory_mb */
        char name[96];
        if (sscanf(v, "%95[^,],%u,%u,%u,%llu", name, &mp->id, &mp->slices, &mp->instances, &mp->memory_mb) == 5) {
            mp->present = 1;
            snprintf(mp->name, sizeof mp->name, "%s", name);
        } else {
            warn("gpu %d: bad %s '%s'", i, buf, v);
        }
    }
    for (int n = 0; n < MAX_INSTANCES; n++) {
        snprintf(buf, sizeof buf, "mig_instance.%d", n);
        const char *v = gpu_lookup(i, buf);
        if (!v || !*v)
            continue;
        struct fake_gi *gi = &g->gis[g->n_gis];
        /* profile_index,gi_id,start,size */
        if (sscanf(v, "%d,%u,%u,%u", &gi->profile_index, &gi->gi_id, &gi->start, &gi->size) == 4 &&
            gi->profile_index >= 0 && gi->profile_index < MAX_PROFILES) {
            gi->gpu = g;
            g->n_gis++;
        } else {
            warn("gpu %d: bad %s '%s'", i, buf, v);
        }
    }
    for (int n = 0; n < MAX_PROCS; n++) {
        snprintf(buf, sizeof buf, "process.%d", n);
        const char *v = gpu_lookup(i, buf);
        if (!v || !*v)
            continue;
        /* pid,name,used MiB (the name is for nvidia-smi's process table only) */
        unsigned int pid;
        char pname[96];
        unsigned long long used = 0;
        if (sscanf(v, "%u,%95[^,],%llu", &pid, pname, &used) >= 1) {
            g->proc_pid[g->n_procs] = pid;
            g->proc_used_mib[g->n_procs] = used;
            g->n_procs++;
        } else {
            warn("gpu %d: bad %s '%s'", i, buf, v);
        }
    }
    g->nvlink_links = (int)gpu_num(i, "nvlink_links", 0);
    if (g->nvlink_links > MAX_LINKS)
        g->nvlink_links = MAX_LINKS;
    g->nvlink_active = (int)gpu_num(i, "nvlink_active", g->nvlink_links);
    gpu_str(i, "nvlink_remote", buf, sizeof buf, "gpu");
    g->nvlink_remote_type = strcmp(buf, "switch") == 0 ? 2 : strcmp(buf, "gpu") == 0 ? 0 : 0xFF;
    g->ecc_sbe_volatile = (unsigned long long)gpu_num(i, "ecc_sbe_volatile", 0);
    g->ecc_sbe_aggregate = (unsigned long long)gpu_num(i, "ecc_sbe_aggregate", 0);
    g->ecc_dbe_volatile = (unsigned long long)gpu_num(i, "ecc_dbe_volatile", 0);
    g->ecc_dbe_aggregate = (unsigned long long)gpu_num(i, "ecc_dbe_aggregate", 0);
    gpu_str(i, "remapped_rows", buf, sizeof buf, "0,0,0,0");
    sscanf(buf, "%u,%u,%u,%u", &g->rr_correctable, &g->rr_uncorrectable, &g->rr_pending, &g->rr_failure);
    g->retired_sbe = (unsigned int)gpu_num(i, "retired_pages_sbe", 0);
    g->retired_dbe = (unsigned int)gpu_num(i, "retired_pages_dbe", 0);
    g->retired_pending = (unsigned int)gpu_num(i, "retired_pages_pending", 0);
    /* SBE, DBE, PState, XID, clock: what a data-centre GPU reports */
    g->event_types = (unsigned long long)gpu_num(i, "supported_event_types", 0x1F);
    g->arch = arch_of(i, g->cc_major, g->cc_minor);
    build_migs(g);
}

static nvmlReturn_t load(void)
{
    const char *path = getenv("AI_L1_FAKE_NVML_SCENARIO");
    if (!path || !*path)
        path = "/etc/ai-l1-fake/nvml-scenario";
    free_kv();
    g_generation++;
    memset(g_nmigs, 0, sizeof g_nmigs);
    snprintf(g_scenario_path, sizeof g_scenario_path, "%s", path);
    if (read_scenario(path) != 0) {
        /* No scenario: behave like a host whose driver is not loaded. */
        warn("scenario file %s not readable", path);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    const char *state = getenv("AI_L1_FAKE_NVML_STATE");
    snprintf(g_state_path, sizeof g_state_path, "%s", state && *state ? state : "/var/lib/ai-l1-fake/nvml-state");
    read_scenario(g_state_path); /* optional */
    g_init_error = parse_error(lookup("init_error"));
    if (g_init_error)
        return g_init_error;
    const char *v = lookup("driver_version");
    snprintf(g_driver_version, sizeof g_driver_version, "%s", v ? v : "550.54.15");
    v = lookup("nvml_version");
    snprintf(g_nvml_version, sizeof g_nvml_version, "12.%s", g_driver_version);
    if (v)
        snprintf(g_nvml_version, sizeof g_nvml_version, "%s", v);
    v = lookup("cuda_driver_version");
    g_cuda_version = v ? atoi(v) : 12040;
    v = lookup("gpu_count");
    g_count = v ? atoi(v) : 0;
    if (g_count < 0 || g_count > MAX_GPUS)
        g_count = 0;
    v = lookup("p2p_nvlink");
    snprintf(g_p2p_nvlink, sizeof g_p2p_nvlink, "%s", v ? v : "none");
    v = lookup("topology_common_ancestor");
    g_topology_level = v ? atoi(v) : 50; /* NVML_TOPOLOGY_SYSTEM */
    for (int i = 0; i < g_count; i++)
        load_gpu(i);
    return NVML_SUCCESS;
}

#define REQUIRE_INIT()                         \
    do {                                       \
        if (g_init_refcount <= 0)              \
            return NVML_ERROR_UNINITIALIZED;   \
    } while (0)

#define CHECK_DEV(d)                                                         \
    do {                                                                     \
        REQUIRE_INIT();                                                      \
        if (!(d) || (d) < g_gpus || (d) >= g_gpus + g_count)                 \
            return NVML_ERROR_INVALID_ARGUMENT;                              \
        int _e = forced((d), __func__);                                      \
        if (_e)                                                              \
            return _e;                                                       \
    } while (0)

/* For the calls that also take a MIG device handle: declares G_ (the GPU, or a MIG
 * device's parent) and M_ (the MIG device, NULL for a GPU). */
#define CHECK_ANY(d, G_, M_)                                                 \
    struct fake_gpu *G_ = NULL;                                              \
    struct fake_mig *M_ = NULL;                                              \
    do {                                                                     \
        REQUIRE_INIT();                                                      \
        if ((d) && (d) >= g_gpus && (d) < g_gpus + g_count)                  \
            G_ = (d);                                                        \
        else if ((M_ = as_mig(d)) != NULL)                                   \
            G_ = M_->gpu;                                                    \
        else                                                                 \
            return NVML_ERROR_INVALID_ARGUMENT;                              \
        int _e = forced(G_, __func__);                                       \
        if (_e)                                                              \
            return _e;                                                       \
    } while (0)

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- init / system ---- */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    if (g_init_refcount > 0) {
        g_init_refcount++;
        return NVML_SUCCESS;
    }
    nvmlReturn_t r = load();
    if (r != NVML_SUCCESS)
        return r;
    g_loaded = 1;
    g_init_refcount = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    REQUIRE_INIT();
    g_init_refcount--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt request issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    REQUIRE_INIT();
    int e = forced(NULL, __func__);
    return e ? e : copy_str(version, length, g_driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    REQUIRE_INIT();
    return copy_str(version, length, g_nvml_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    /* Real NVML answers this one even before nvmlInit. */
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g_loaded) {
        nvmlReturn_t r = load();
        if (r)
            return r;
        g_loaded = 1;
    }
    int e = forced(NULL, __func__);
    if (e)
        return e;
    *v = g_cuda_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g_loaded) {
        nvmlReturn_t r = load();
        if (r)
            return r;
        g_loaded = 1;
    }
    int e = forced(NULL, __func__);
    if (e)
        return e;
    *v = g_cuda_version;
    return NVML_SUCCESS;
}

/* ---- enumeration ---- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    REQUIRE_INIT();
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    int e = forced(NULL, __func__);
    if (e)
        return e;
    *count = (unsigned int)g_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    if (!device || index >= (unsigned int)g_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    int e = forced(&g_gpus[index], __func__);
    if (e)
        return e;
    *device = &g_gpus[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g_count; i++)
        if (strcmp(g_gpus[i].uuid, uuid) == 0) {
            *device = &g_gpus[i];
            return NVML_SUCCESS;
        }
    /* A MIG device's UUID gives its MIG device handle, as on current drivers. */
    for (int i = 0; i < g_count; i++)
        for (int k = 0; k < g_nmigs[i]; k++)
            if (strcmp(g_migs[i][k].uuid, uuid) == 0) {
                *device = (nvmlDevice_t)&g_migs[i][k];
                return NVML_SUCCESS;
            }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    unsigned int dom = 0, bus = 0, dev = 0;
    if (!bus_id || !device || sscanf(bus_id, "%x:%x:%x", &dom, &bus, &dev) != 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g_count; i++)
        if (g_gpus[i].domain == dom && g_gpus[i].bus == bus && g_gpus[i].device == dev) {
            *device = &g_gpus[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{
    CHECK_ANY(d, g, mig);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* a MIG device handle: its index on the parent GPU (what the CDI spec generator reads) */
    *index = mig ? mig->index : (unsigned int)g->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
    CHECK_DEV(d);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned int)d->index;
    return NVML_SUCCESS;
}

/* ---- identity ---- */
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    CHECK_ANY(d, g, mig);
    return copy_str(name, length, mig ? mig->name : g->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    CHECK_ANY(d, g, mig);
    return copy_str(uuid, length, mig ? mig->uuid : g->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length)
{
    CHECK_DEV(d);
    return copy_str(serial, length, d->serial);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *version, unsigned int length)
{
    CHECK_DEV(d);
    return copy_str(version, length, d->vbios);
}

static void fill_pci(const struct fake_gpu *d, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", d->domain, d->bus, d->device);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->pci_bus_id);
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->device;
    pci->pciDeviceId = d->pci_device_id;
    pci->pciSubSystemId = d->pci_subsystem_id;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    CHECK_DEV(d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(d, pci);
    return NVML_SUCCESS;
}

/* ---- state ---- */
/* A MIG device has its instance's memory (the profile's), none of it used. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    CHECK_ANY(d, g, mig);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = (mig ? mig->memory_mb : g->memory_total_mib) << 20;
    m->used = mig ? 0 : g->memory_used_mib << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    CHECK_ANY(d, g, mig);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != NVML_MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = (mig ? mig->memory_mb : g->memory_total_mib) << 20;
    m->reserved = 0;
    m->used = mig ? 0 : g->memory_used_mib << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp)
{
    CHECK_DEV(d);
    if (!temp || sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)d->temperature_c;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_v1_t *t)
{
    CHECK_DEV(d);
    if (!t || t->sensorType != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (t->version != NVML_TEMPERATURE_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    t->temperature = d->temperature_c;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
    CHECK_DEV(d);
    if (!mw)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_usage_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw)
{
    CHECK_DEV(d);
    if (!mw)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_limit_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *mw)
{
    CHECK_DEV(d);
    if (!mw)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_limit_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *mode)
{
    CHECK_DEV(d);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = d->persistence_mode;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    CHECK_DEV(d);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
}

/* GPU fabric (NVLink multi-node, Hopper and later): an A100 has none, as the real driver says. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, void *info)
{
    CHECK_DEV(d);
    (void)info;
    return NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, void *info)
{
    CHECK_DEV(d);
    (void)info;
    return NVML_ERROR_NOT_SUPPORTED;
}

/* ---- MIG ---- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending)
{
    CHECK_DEV(d);
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned int)d->mig_current;
    *pending = (unsigned int)d->mig_pending;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count)
{
    CHECK_DEV(d);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = d->mig_max_devices;
    return NVML_SUCCESS;
}

static nvmlReturn_t profile_of(nvmlDevice_t d, unsigned int profile, struct mig_profile **out)
{
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (profile >= MAX_PROFILES)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->profiles[profile].present)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = &d->profiles[profile];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile,
                                                        nvmlGpuInstanceProfileInfo_t *info)
{
    CHECK_DEV(d);
    struct mig_profile *p;
    nvmlReturn_t r = profile_of(d, profile, &p);
    if (r)
        return r;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->slices * 14;
    info->copyEngineCount = p->slices;
    info->memorySizeMB = p->memory_mb;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_v2_t *info)
{
    CHECK_DEV(d);
    struct mig_profile *p;
    nvmlReturn_t r = profile_of(d, profile, &p);
    if (r)
        return r;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != NVML_GI_PROFILE_INFO_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->slices * 14;
    info->copyEngineCount = p->slices;
    info->decoderCount = info->encoderCount = info->jpegCount = info->ofaCount = 0;
    info->memorySizeMB = p->memory_mb;
    snprintf(info->name, sizeof info->name, "%s", p->name);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int profile_id,
                                              nvmlGpuInstance_t *instances, unsigned int *count)
{
    CHECK_DEV(d);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!d->mig_current)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < d->n_gis; i++) {
        struct mig_profile *p = &d->profiles[d->gis[i].profile_index];
        if (!p->present || p->id != profile_id)
            continue;
        if (instances)
            instances[n] = &d->gis[i];
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info)
{
    REQUIRE_INIT();
    if (!gi || !info || !gi->gpu)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = gi->gpu;
    info->id = gi->gi_id;
    info->profileId = gi->gpu->profiles[gi->profile_index].id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}

/* ---- processes (nvmlProcessInfo_v2_t: the _v2 and _v3 calls share it) ---- */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static nvmlReturn_t procs(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
    CHECK_DEV(d);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int room = *count;
    *count = (unsigned int)d->n_procs;
    if (room < (unsigned int)d->n_procs || (!infos && d->n_procs))
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (int i = 0; i < d->n_procs; i++) {
        infos[i].pid = d->proc_pid[i];
        infos[i].usedGpuMemory = d->proc_used_mib[i] << 20;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p)
{
    return procs(d, c, p);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *p)
{
    return procs(d, c, p);
}

/* ---- NVLink / topology ---- */
static nvmlReturn_t link_check(nvmlDevice_t d, unsigned int link)
{
    if (d->nvlink_links <= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)d->nvlink_links)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, unsigned int *active)
{
    CHECK_DEV(d);
    nvmlReturn_t r = link_check(d, link);
    if (r)
        return r;
    if (!active)
        return NVML_ERROR_INVALID_ARGUMENT;
    *active = link < (unsigned int)d->nvlink_active ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int link, unsigned int *version)
{
    CHECK_DEV(d);
    nvmlReturn_t r = link_check(d, link);
    if (r)
        return r;
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = (unsigned int)gpu_num(d->index, "nvlink_version", 4);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *type)
{
    CHECK_DEV(d);
    nvmlReturn_t r = link_check(d, link);
    if (r)
        return r;
    if (!type)
        return NVML_ERROR_INVALID_ARGUMENT;
    *type = d->nvlink_remote_type;
    return NVML_SUCCESS;
}

/* p2p_nvlink: "all", "none" or a list of pairs "0-1,2-3". */
static int nvlink_pair(int a, int b)
{
    if (strcmp(g_p2p_nvlink, "all") == 0)
        return 1;
    if (strcmp(g_p2p_nvlink, "none") == 0)
        return 0;
    const char *s = g_p2p_nvlink;
    while (*s) {
        int x, y, n = 0;
        if (sscanf(s, "%d-%d%n", &x, &y, &n) != 2)
            break;
        if ((x == a && y == b) || (x == b && y == a))
            return 1;
        s += n;
        while (*s == ',' || *s == ' ')
            s++;
    }
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t d1, nvmlDevice_t d2, int index, int *status)
{
    CHECK_DEV(d1);
    CHECK_DEV(d2);
    if (!status)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index == 2) /* NVML_P2P_CAPS_INDEX_NVLINK */
        *status = d1 != d2 && nvlink_pair(d1->index, d2->index) ? 0 : 5; /* OK : NOT_SUPPORTED */
    else
        *status = 0; /* PCIe read/write/atomics/prop: fine on these machines */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t d1, nvmlDevice_t d2, int *level)
{
    CHECK_DEV(d1);
    CHECK_DEV(d2);
    if (!level)
        return NVML_ERROR_INVALID_ARGUMENT;
    *level = d1 == d2 ? 0 : g_topology_level;
    return NVML_SUCCESS;
}

/* ---- health ---- */
EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, int *current, int *pending)
{
    CHECK_DEV(d);
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type,
                                                unsigned long long *count)
{
    CHECK_DEV(d);
    if (!count || error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (error_type == 1) /* uncorrected = double bit */
        *count = counter_type == 0 ? d->ecc_dbe_volatile : d->ecc_dbe_aggregate;
    else
        *count = counter_type == 0 ? d->ecc_sbe_volatile : d->ecc_sbe_aggregate;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure)
{
    CHECK_DEV(d);
    if (!corr || !unc || !pending || !failure)
        return NVML_ERROR_INVALID_ARGUMENT;
    *corr = d->rr_correctable;
    *unc = d->rr_uncorrectable;
    *pending = d->rr_pending;
    *failure = d->rr_failure;
    return NVML_SUCCESS;
}

static nvmlReturn_t retired(nvmlDevice_t d, int cause, unsigned int *count, unsigned long long *addresses,
                            unsigned long long *timestamps)
{
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = cause == 1 ? d->retired_dbe : d->retired_sbe;
    if (!addresses || *count < n) {
        /* Size query, as pynvml does first. */
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        addresses[i] = 0x1000ULL * (i + 1) + (cause == 1 ? 0x80000000ULL : 0);
        if (timestamps)
            timestamps[i] = 1714550400ULL + i;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned int *count,
                                              unsigned long long *addresses)
{
    CHECK_DEV(d);
    return retired(d, cause, count, addresses, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t d, int cause, unsigned int *count,
                                                 unsigned long long *addresses, unsigned long long *timestamps)
{
    CHECK_DEV(d);
    return retired(d, cause, count, addresses, timestamps);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *pending)
{
    CHECK_DEV(d);
    if (!pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pending = (int)d->retired_pending;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch)
{
    CHECK_DEV(d);
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    *arch = d->arch;
    return NVML_SUCCESS;
}

/* ---- NVLink remote ends (go-gpuallocator counts the links between two GPUs) ---- */
/* nvlink_remote=gpu: the links go round-robin to the GPUs p2p_nvlink pairs this one
 * with; nvlink_remote=switch: link L ends on NVSwitch L % 6, PCI 00000000:C<L%6>:00.0. */
static nvmlReturn_t remote_pci(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    CHECK_DEV(d);
    nvmlReturn_t r = link_check(d, link);
    if (r)
        return r;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->nvlink_remote_type == 2) {
        struct fake_gpu sw;
        memset(&sw, 0, sizeof sw);
        snprintf(sw.pci_bus_id, sizeof sw.pci_bus_id, "00000000:%02X:00.0", 0xC0 + link % 6);
        sw.bus = 0xC0 + link % 6;
        sw.pci_device_id = 0x1AF110DE; /* NVSwitch */
        sw.pci_subsystem_id = 0x000010DE;
        fill_pci(&sw, pci);
        return NVML_SUCCESS;
    }
    int peers[MAX_GPUS], n = 0;
    for (int j = 0; j < g_count; j++)
        if (&g_gpus[j] != d && g_gpus[j].nvlink_links > 0 && nvlink_pair(d->index, j))
            peers[n++] = j;
    if (!n)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_pci(&g_gpus[peers[link % (unsigned int)n]], pci);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    return remote_pci(d, link, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    return remote_pci(d, link, pci);
}

/* ---- MIG devices (one compute instance, ID 0, per GPU instance) ---- */
typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount;
    unsigned int sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int start, size;
} nvmlComputeInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id, profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount;
    unsigned int sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount;
    unsigned int sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[96];
} nvmlComputeInstanceProfileInfo_v2_t;
#define NVML_CI_PROFILE_INFO_V2 0x02000088u

_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t");
_Static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32, "nvmlComputeInstanceInfo_t");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == 136, "nvmlComputeInstanceProfileInfo_v2_t");

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig)
{
    CHECK_DEV(d);
    if (!mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= (unsigned int)g_nmigs[d->index])
        return NVML_ERROR_NOT_FOUND;
    *mig = (nvmlDevice_t)&g_migs[d->index][index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig)
{
    CHECK_ANY(d, g, mig);
    (void)g;
    if (!is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = mig != NULL;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent)
{
    CHECK_ANY(d, g, mig);
    if (!parent || !mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *parent = g;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id)
{
    CHECK_ANY(d, g, mig);
    (void)g;
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = mig->gi->gi_id;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id)
{
    CHECK_ANY(d, g, mig);
    (void)g;
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = 0;
    return NVML_SUCCESS;
}

/* "This API currently only supports MIG device handles" (nvml.h). */
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
    CHECK_ANY(d, g, mig);
    (void)g;
    if (!a)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(a, 0, sizeof *a);
    a->multiprocessorCount = mig->slices * 14; /* as the fake's GPU instance profiles */
    a->sharedCopyEngineCount = mig->slices;
    a->gpuInstanceSliceCount = mig->slices;
    a->computeInstanceSliceCount = mig->slices;
    a->memorySizeMB = mig->memory_mb;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
    return nvmlDeviceGetAttributes_v2(d, a);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gi)
{
    CHECK_DEV(d);
    if (!gi)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig_supported || !d->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    for (int k = 0; k < d->n_gis; k++)
        if (d->gis[k].gi_id == id) {
            *gi = &d->gis[k];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

static struct fake_mig *mig_of_gi(const struct fake_gi *gi)
{
    for (int i = 0; i < g_count; i++)
        for (int k = 0; k < g_nmigs[i]; k++)
            if (g_migs[i][k].gi == gi)
                return &g_migs[i][k];
    return NULL;
}

static int valid_gi(const struct fake_gi *gi)
{
    for (int i = 0; i < g_count; i++)
        if (gi >= g_gpus[i].gis && gi < g_gpus[i].gis + g_gpus[i].n_gis)
            return 1;
    return 0;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned int id,
                                                          nvmlComputeInstance_t *ci)
{
    REQUIRE_INIT();
    if (!gi || !ci || !valid_gi(gi))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_mig *m = mig_of_gi(gi);
    if (!m || id != 0)
        return NVML_ERROR_NOT_FOUND;
    *ci = m;
    return NVML_SUCCESS;
}

static nvmlReturn_t ci_info(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info, size_t size)
{
    REQUIRE_INIT();
    struct fake_mig *m = as_mig(ci);
    if (!m || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlComputeInstanceInfo_t v;
    v.device = m->gpu;
    v.gpuInstance = m->gi;
    v.id = 0;
    v.profileId = m->ci_profile;
    v.placement.start = 0;
    v.placement.size = m->slices;
    memcpy(info, &v, size);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
    return ci_info(ci, info, sizeof *info);
}

/* v1: the struct before placement was added (device, gpuInstance, id, profileId). */
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
    return ci_info(ci, info, offsetof(nvmlComputeInstanceInfo_t, placement));
}

/* Compute instance profiles of a GPU instance of G slices: C slices with C == G or
 * 2C <= G + 1 (1c..4c and 7c on a 7g, 1c, 2c, 4c on a 4g, ...); one engine profile. */
static nvmlReturn_t ci_profile(nvmlGpuInstance_t gi, unsigned int profile, unsigned int eng,
                               nvmlComputeInstanceProfileInfo_t *out, char *name, size_t name_size)
{
    REQUIRE_INIT();
    if (!gi || !valid_gi(gi) || profile >= CI_PROFILE_COUNT || eng != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gi->profile_index < 0 || gi->profile_index >= MAX_PROFILES || !gi->gpu->profiles[gi->profile_index].present)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int g = gi->gpu->profiles[gi->profile_index].slices, c = ci_profile_slices[profile];
    if (profile >= 7 || c > g || (c != g && 2 * c > g + 1))
        return NVML_ERROR_NOT_SUPPORTED;
    memset(out, 0, sizeof *out);
    out->id = profile;
    out->sliceCount = c;
    out->instanceCount = g / c;
    out->multiprocessorCount = c * 14;
    out->sharedCopyEngineCount = g;
    if (name) {
        /* "MIG 1g.10gb" -> "MIG 1c.1g.10gb" for a smaller compute instance */
        const char *gname = gi->gpu->profiles[gi->profile_index].name;
        const char *rest = strncmp(gname, "MIG ", 4) == 0 ? gname + 4 : gname;
        if (c == g)
            snprintf(name, name_size, "MIG %s", rest);
        else
            snprintf(name, name_size, "MIG %uc.%s", c, rest);
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int profile,
                                                                 unsigned int eng,
                                                                 nvmlComputeInstanceProfileInfo_t *info)
{
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    return ci_profile(gi, profile, eng, info, NULL, 0);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gi, unsigned int profile,
                                                                  unsigned int eng,
                                                                  nvmlComputeInstanceProfileInfo_v2_t *info)
{
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != NVML_CI_PROFILE_INFO_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlComputeInstanceProfileInfo_t v1;
    char name[96];
    nvmlReturn_t r = ci_profile(gi, profile, eng, &v1, name, sizeof name);
    if (r)
        return r;
    info->id = v1.id;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->sharedCopyEngineCount = v1.sharedCopyEngineCount;
    info->sharedDecoderCount = info->sharedEncoderCount = info->sharedJpegCount = info->sharedOfaCount = 0;
    snprintf(info->name, sizeof info->name, "%s", name);
    return NVML_SUCCESS;
}

/* ---- events ----
 * Event sources, re-read at every poll of nvmlEventSetWait:
 *   gpu.<index|*>.xid.<n>=<code>[,<GPU instance ID>,<compute instance ID>]
 *   gpu.<index|*>.event.<n>=<type name or mask>[,<event data>[,<GI ID>,<CI ID>]]
 * in the scenario and state files, and the `NVRM: Xid (PCI:<bus>): <code>` lines of the
 * file named by `xid_kernel_log` (relative to the scenario's folder), matched to a GPU by
 * PCI domain:bus:device. An event is its GPU, its key (or kernel log line) and its value;
 * each event set delivers each one once, in file order. As with the real driver, what is
 * listed when a device is registered is history and not delivered, unless the scenario
 * sets event_replay=1. */
#define EVENT_POLL_MS 50

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* nvmlEventSetWait (v1) fills the layout of drivers before MIG: no instance IDs. */
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
} nvmlEventData_v1_t;

_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");
_Static_assert(sizeof(nvmlEventData_v1_t) == 24, "nvmlEventData_v1_t");

struct fake_eventset {
    struct fake_eventset *next;
    unsigned long long mask[MAX_GPUS]; /* registered event types per GPU */
    uint64_t *seen;                    /* events delivered (or history at registration) */
    size_t nseen, capseen;
};
typedef struct fake_eventset *nvmlEventSet_t;

struct pending_event {
    int gpu;
    unsigned long long type, data;
    unsigned int gi, ci;
    uint64_t id;
};

struct evlist {
    struct pending_event *v;
    size_t n, cap;
};

static pthread_mutex_t g_ev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_eventset *g_sets;

static const struct {
    const char *name;
    unsigned long long type;
} event_names[] = {
    {"sbe", 0x1},
    {"dbe", 0x2},
    {"pstate", 0x4},
    {"xid", 0x8}, /* nvmlEventTypeXidCriticalError */
    {"clock", 0x10},
    {"power_source", 0x80},
    {"mig_config", 0x100},
    {"sbe_storm", 0x200},
    {"dram_retirement", 0x400},
    {"dram_retirement_failure", 0x800},
    {"nonfatal_poison", 0x1000},
    {"fatal_poison", 0x2000},
    {"gpu_unavailable", 0x4000},
    {"gpu_recovery_action", 0x8000},
};

static uint64_t fnv(uint64_t h, const char *s)
{
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ULL;
    }
    return h;
}
#define FNV_START 14695981039346656037ULL

static void ev_push(struct evlist *l, const struct pending_event *e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct pending_event *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *e;
}

static unsigned long long parse_event_type(const char *s, size_t len)
{
    char name[64];
    if (!len || len >= sizeof name)
        return 0;
    memcpy(name, s, len);
    name[len] = 0;
    if (isdigit((unsigned char)name[0]))
        return strtoull(name, NULL, 0);
    for (size_t k = 0; k < sizeof event_names / sizeof *event_names; k++)
        if (strcasecmp(name, event_names[k].name) == 0)
            return event_names[k].type;
    return 0;
}

/* "79[,gi,ci]" (xid) or "type[,data[,gi,ci]]" (event); 0 when malformed. */
static int parse_event_value(const char *v, int is_xid, struct pending_event *e)
{
    e->gi = e->ci = 0xFFFFFFFFu;
    e->data = 0;
    const char *rest;
    if (is_xid) {
        char *end;
        if (!isdigit((unsigned char)*v))
            return 0;
        e->type = 0x8;
        e->data = strtoull(v, &end, 10);
        rest = end;
    } else {
        size_t len = strcspn(v, ",");
        e->type = parse_event_type(v, len);
        if (!e->type)
            return 0;
        rest = v + len;
        if (*rest == ',') {
            char *end;
            e->data = strtoull(rest + 1, &end, 0);
            rest = end;
        }
    }
    if (*rest == ',') {
        unsigned int gi, ci;
        if (sscanf(rest + 1, "%u,%u", &gi, &ci) != 2)
            return 0;
        e->gi = gi;
        e->ci = ci;
    } else if (*rest) {
        return 0;
    }
    return 1;
}

static void scenario_events(const struct kv *kv, int n, struct evlist *out)
{
    for (int i = 0; i < n; i++) {
        const char *key = kv[i].key, *val = kv[i].val;
        if (strncmp(key, "gpu.", 4) != 0)
            continue;
        const char *sel = key + 4, *dot = strchr(sel, '.');
        if (!dot)
            continue;
        const char *rest = dot + 1;
        int is_xid = strncmp(rest, "xid.", 4) == 0 && rest[4];
        if (!is_xid && !(strncmp(rest, "event.", 6) == 0 && rest[6]))
            continue;
        if (kv_find(kv, n, key) != val || !*val) /* redefined later, or removed */
            continue;
        struct pending_event e;
        if (!parse_event_value(val, is_xid, &e))
            continue;
        int first = 0, last = -1;
        if (dot == sel + 1 && *sel == '*') {
            last = g_count - 1;
        } else {
            char *end;
            long g = strtol(sel, &end, 10);
            if (end != dot || end == sel || g < 0 || g >= g_count)
                continue;
            first = last = (int)g;
        }
        for (int g = first; g <= last; g++) {
            char k2[256], gs[16];
            snprintf(k2, sizeof k2, "gpu.%d.%s", g, rest);
            if (*sel == '*' && kv_find(kv, n, k2)) /* the GPU's own key overrides the default */
                continue;
            snprintf(gs, sizeof gs, "%d|", g);
            e.gpu = g;
            e.id = fnv(fnv(fnv(fnv(FNV_START, "scenario|"), gs), rest), val);
            ev_push(out, &e);
        }
    }
}

/* The kernel log is read incrementally: what was parsed is kept while the file (same
 * inode, not shorter) only grows; a line counts once it ends with a newline. */
static struct {
    char path[8192];
    unsigned int generation;
    dev_t dev;
    ino_t ino;
    off_t offset;
    struct evlist ev;
} g_klog;

static void klog_parse_line(char *line, struct evlist *out)
{
    static const char tag[] = "NVRM: Xid (PCI:";
    char *p = strstr(line, tag);
    if (!p)
        return;
    unsigned int dom, bus, dev;
    int used = 0;
    if (sscanf(p + sizeof tag - 1, "%x:%x:%x%n", &dom, &bus, &dev, &used) != 3)
        return;
    p = strchr(p + sizeof tag - 1 + used, ')');
    if (!p || strncmp(p, "): ", 3) != 0 || !isdigit((unsigned char)p[3]))
        return;
    struct pending_event e = {.type = 0x8, .gi = 0xFFFFFFFFu, .ci = 0xFFFFFFFFu, .gpu = -1};
    e.data = strtoull(p + 3, NULL, 10);
    for (int g = 0; g < g_count && e.gpu < 0; g++)
        if (g_gpus[g].domain == dom && g_gpus[g].bus == bus && g_gpus[g].device == dev)
            e.gpu = g;
    if (e.gpu < 0)
        return;
    e.id = fnv(fnv(FNV_START, "kernel log|"), line);
    ev_push(out, &e);
}

static void kernel_log_events(const char *klog, struct evlist *out)
{
    char path[8192];
    if (klog[0] == '/') {
        snprintf(path, sizeof path, "%s", klog);
    } else {
        const char *slash = strrchr(g_scenario_path, '/');
        int dir = slash ? (int)(slash - g_scenario_path) : 1;
        snprintf(path, sizeof path, "%.*s/%s", dir, slash ? g_scenario_path : ".", klog);
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    if (strcmp(path, g_klog.path) != 0 || g_klog.generation != g_generation || g_klog.dev != st.st_dev ||
        g_klog.ino != st.st_ino || st.st_size < g_klog.offset) {
        free(g_klog.ev.v);
        memset(&g_klog, 0, sizeof g_klog);
        snprintf(g_klog.path, sizeof g_klog.path, "%s", path);
        g_klog.generation = g_generation;
        g_klog.dev = st.st_dev;
        g_klog.ino = st.st_ino;
    }
    if (st.st_size > g_klog.offset) {
        FILE *f = fopen(path, "r");
        if (f && fseeko(f, g_klog.offset, SEEK_SET) == 0) {
            char *line = NULL;
            size_t cap = 0;
            ssize_t len;
            while ((len = getline(&line, &cap, f)) > 0 && line[len - 1] == '\n') {
                g_klog.offset += len;
                line[len - 1] = 0;
                klog_parse_line(line, &g_klog.ev);
            }
            free(line);
        }
        if (f)
            fclose(f);
    }
    for (size_t i = 0; i < g_klog.ev.n; i++)
        ev_push(out, &g_klog.ev.v[i]);
}

/* The scenario and state files as they are now; events in file order. Called with
 * g_ev_lock held. */
struct snapshot {
    struct kv *kv;
    int n;
    struct evlist ev;
};

static int snapshot_take(struct snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->kv = calloc(MAX_KV, sizeof *s->kv);
    if (!s->kv)
        return -1;
    read_kv(g_scenario_path, s->kv, &s->n, 1); /* gone meanwhile: no events */
    read_kv(g_state_path, s->kv, &s->n, 1);
    scenario_events(s->kv, s->n, &s->ev);
    const char *klog = kv_find(s->kv, s->n, "xid_kernel_log");
    if (klog && *klog)
        kernel_log_events(klog, &s->ev);
    return 0;
}

static void snapshot_free(struct snapshot *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    free(s->kv);
    free(s->ev.v);
}

/* set->seen is kept sorted: the first index whose ID is >= id. */
static size_t seen_pos(const struct fake_eventset *set, uint64_t id)
{
    size_t lo = 0, hi = set->nseen;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (set->seen[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int seen(const struct fake_eventset *set, uint64_t id)
{
    size_t i = seen_pos(set, id);
    return i < set->nseen && set->seen[i] == id;
}

static int mark_seen(struct fake_eventset *set, uint64_t id)
{
    size_t i = seen_pos(set, id);
    if (i < set->nseen && set->seen[i] == id)
        return 0;
    if (set->nseen == set->capseen) {
        size_t cap = set->capseen ? 2 * set->capseen : 32;
        uint64_t *v = realloc(set->seen, cap * sizeof *v);
        if (!v)
            return -1;
        set->seen = v;
        set->capseen = cap;
    }
    memmove(set->seen + i + 1, set->seen + i, (set->nseen - i) * sizeof *set->seen);
    set->seen[i] = id;
    set->nseen++;
    return 0;
}

static int set_live(const struct fake_eventset *set)
{
    for (const struct fake_eventset *s = g_sets; s; s = s->next)
        if (s == set)
            return 1;
    return 0;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    REQUIRE_INIT();
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    int e = forced(NULL, __func__);
    if (e)
        return e;
    struct fake_eventset *s = calloc(1, sizeof *s);
    if (!s)
        return NVML_ERROR_UNKNOWN;
    pthread_mutex_lock(&g_ev_lock);
    s->next = g_sets;
    g_sets = s;
    pthread_mutex_unlock(&g_ev_lock);
    *set = s;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    REQUIRE_INIT();
    pthread_mutex_lock(&g_ev_lock);
    struct fake_eventset **p = &g_sets;
    while (*p && *p != set)
        p = &(*p)->next;
    if (!*p) {
        pthread_mutex_unlock(&g_ev_lock);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *p = set->next;
    pthread_mutex_unlock(&g_ev_lock);
    free(set->seen);
    free(set);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
    if (as_mig(d) && g_init_refcount > 0)
        return NVML_ERROR_NOT_SUPPORTED;
    CHECK_DEV(d);
    if (!types)
        return NVML_ERROR_INVALID_ARGUMENT;
    *types = d->event_types;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set)
{
    /* "This API does not currently support per-instance event reporting using MIG
     * device handles": register the parent GPU. */
    if (as_mig(d) && g_init_refcount > 0)
        return NVML_ERROR_NOT_SUPPORTED;
    CHECK_DEV(d);
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~d->event_types)
        return NVML_ERROR_NOT_SUPPORTED; /* none of the types is registered then */
    struct snapshot snap;
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&g_ev_lock);
    if (snapshot_take(&snap)) {
        pthread_mutex_unlock(&g_ev_lock);
        return NVML_ERROR_UNKNOWN;
    }
    const char *replay = kv_find(snap.kv, snap.n, "event_replay");
    if (!set_live(set)) {
        r = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        unsigned long long added = types & ~set->mask[d->index];
        set->mask[d->index] |= types;
        if (!(replay && atoi(replay)))
            for (size_t i = 0; i < snap.ev.n; i++) /* what happened before is history */
                if (snap.ev.v[i].gpu == d->index && (snap.ev.v[i].type & added))
                    mark_seen(set, snap.ev.v[i].id);
    }
    pthread_mutex_unlock(&g_ev_lock);
    snapshot_free(&snap);
    return r;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One look at the sources: SUCCESS with *out, TIMEOUT when nothing is due, or an
 * error injected with error.<fn> (read now, so a test can inject it mid-wait). */
static nvmlReturn_t poll_events(struct fake_eventset *set, const char *fn, struct pending_event *out)
{
    struct snapshot snap;
    pthread_mutex_lock(&g_ev_lock); /* also guards the kernel log cache */
    if (snapshot_take(&snap)) {
        pthread_mutex_unlock(&g_ev_lock);
        return NVML_ERROR_UNKNOWN;
    }
    char k[128];
    snprintf(k, sizeof k, "error.%s", fn);
    nvmlReturn_t r = parse_error(kv_find(snap.kv, snap.n, k));
    if (!r && !set_live(set))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (!r) {
        r = NVML_ERROR_TIMEOUT;
        for (size_t i = 0; i < snap.ev.n; i++) {
            struct pending_event *e = &snap.ev.v[i];
            if ((set->mask[e->gpu] & e->type) && !seen(set, e->id)) {
                mark_seen(set, e->id);
                *out = *e;
                r = NVML_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_ev_lock);
    snapshot_free(&snap);
    return r;
}

static nvmlReturn_t event_wait(nvmlEventSet_t set, struct pending_event *e, unsigned int timeoutms, const char *fn)
{
    REQUIRE_INIT();
    long long deadline = now_ms() + timeoutms;
    for (;;) {
        nvmlReturn_t r = poll_events(set, fn, e);
        if (r != NVML_ERROR_TIMEOUT)
            return r;
        long long left = deadline - now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        long long ms = left < EVENT_POLL_MS ? left : EVENT_POLL_MS;
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!data)
        return g_init_refcount > 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    struct pending_event e;
    nvmlReturn_t r = event_wait(set, &e, timeoutms, __func__);
    if (r)
        return r;
    data->device = &g_gpus[e.gpu];
    data->eventType = e.type;
    data->eventData = e.data;
    data->gpuInstanceId = e.gi;
    data->computeInstanceId = e.ci;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t *data, unsigned int timeoutms)
{
    if (!data)
        return g_init_refcount > 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    struct pending_event e;
    nvmlReturn_t r = event_wait(set, &e, timeoutms, __func__);
    if (r)
        return r;
    data->device = &g_gpus[e.gpu];
    data->eventType = e.type;
    data->eventData = e.data;
    return NVML_SUCCESS;
}
