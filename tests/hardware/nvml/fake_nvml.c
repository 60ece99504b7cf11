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
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
};

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

static int read_scenario(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    while (fgets(line, sizeof line, f) && g_nkv < MAX_KV) {
        char *l = trim(line);
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        if (!eq)
            continue;
        *eq = 0;
        g_kv[g_nkv].key = strdup(trim(l));
        g_kv[g_nkv].val = unescape(trim(eq + 1));
        g_nkv++;
    }
    fclose(f);
    return 0;
}

/* Last definition wins; "gpu.N.key" beats "gpu.*.key". */
static const char *lookup(const char *key)
{
    for (int i = g_nkv - 1; i >= 0; i--)
        if (strcmp(g_kv[i].key, key) == 0)
            return g_kv[i].val;
    return NULL;
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
}

static nvmlReturn_t load(void)
{
    const char *path = getenv("AI_L1_FAKE_NVML_SCENARIO");
    if (!path || !*path)
        path = "/etc/ai-l1-fake/nvml-scenario";
    free_kv();
    if (read_scenario(path) != 0) {
        /* No scenario: behave like a host whose driver is not loaded. */
        warn("scenario file %s not readable", path);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    const char *state = getenv("AI_L1_FAKE_NVML_STATE");
    read_scenario(state && *state ? state : "/var/lib/ai-l1-fake/nvml-state"); /* optional */
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
    CHECK_DEV(d);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)d->index;
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
    CHECK_DEV(d);
    return copy_str(name, length, d->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    CHECK_DEV(d);
    return copy_str(uuid, length, d->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length)
{
    CHECK_DEV(d);
    return copy_str(serial, length, d->serial);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    CHECK_DEV(d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", d->domain, d->bus, d->device);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->pci_bus_id);
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->device;
    pci->pciDeviceId = d->pci_device_id;
    pci->pciSubSystemId = d->pci_subsystem_id;
    return NVML_SUCCESS;
}

/* ---- state ---- */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    CHECK_DEV(d);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = d->memory_total_mib << 20;
    m->used = d->memory_used_mib << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    CHECK_DEV(d);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != NVML_MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = d->memory_total_mib << 20;
    m->reserved = 0;
    m->used = d->memory_used_mib << 20;
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
