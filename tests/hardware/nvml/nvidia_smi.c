/*
 * Fake nvidia-smi: answers through NVML (our fake libnvidia-ml.so.1), as the
 * real tool does, so it always agrees with what pynvml sees.
 * Supported: no arguments (summary), -L, --version, -i/--id=N,
 * --query-gpu=f1,f2,... --format=csv[,noheader][,nounits].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const char *q = NULL;
    int only = -1, list = 0, version = 0, csv = 0;
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
        else if (!strncmp(a, "--format=", 9) || (!strcmp(a, "--format") && i + 1 < argc)) {
            const char *f = a[8] == '=' ? a + 9 : argv[++i];
            csv = strstr(f, "csv") != NULL;
            noheader = strstr(f, "noheader") != NULL;
            nounits = strstr(f, "nounits") != NULL;
        } else if (!strncmp(a, "--id=", 5))
            only = atoi(a + 5);
        else if (!strcmp(a, "-i") && i + 1 < argc)
            only = atoi(argv[++i]);
        else {
            fprintf(stderr, "fake nvidia-smi: unsupported argument '%s'\n", a);
            return 2;
        }
    }
    if (version) {
        printf("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
               "CUDA Version        : %d.%d\n",
               g_driver, g_driver, g_driver, g_cuda / 1000, (g_cuda % 1000) / 10);
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
