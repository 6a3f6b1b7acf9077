/* A hostile (or merely odd) target for tests/py/test_hostile.py: a process
 * that publishes the Elastic v1 process storage and thread records through the
 * unit-test agent library (elastic-jvmti-linux-unittest.so, dlopen'ed), and
 * then does what a target tracecorr does not trust may do:
 *
 *   --library PATH     the agent library to dlopen (required unless --deep-map only)
 *   --socket PATH      bind a unix datagram socket at PATH (held by this process,
 *                      drained by a thread of its own)
 *   --bind-relative    bind it relative to its directory (chdir there first),
 *                      as agents must for paths longer than sun_path
 *   --stream           make that socket SOCK_STREAM instead
 *   --publish TEXT     the socket-file-path to publish (default: the --socket path)
 *   --fifo PATH        make a FIFO at PATH (publish it with --publish)
 *   --threads N        worker threads that each publish a record (default 2)
 *   --vfork            one more thread calls vfork(); its child never execs
 *   --deep-map N       map a file N directories deep, each name 200 bytes (paths of 201N+ bytes)
 *   --zombie-leader    the main thread calls pthread_exit once the workers run
 *   --spin             one more thread burns CPU for ever (starves the others in a CPU-quota cgroup)
 *   --exit-after MS    the whole process exits MS ms after "ready"
 *   --exec-after MS    the process execs /bin/sleep 600 MS ms after "ready"
 *   --service TEXT     service name to publish (default "hostile")
 *
 * Prints "ready PID" on stdout once everything is published, then runs until
 * killed. Tests run it in its own session and kill the whole group (the vfork
 * child included). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "elastic_v1_layout.h"

static void (*set_record)(void *);
static void (*publish_storage)(void *);
static pthread_barrier_t g_started;

static void die(const char *what) {
  fprintf(stderr, "hostile_target: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void *worker(void *arg) {
  uintptr_t n = (uintptr_t)arg;
  uint8_t *rec = calloc(1, TC_TLS_RECORD_SIZE);
  if (!rec) die("calloc");
  rec[TC_TLS_LAYOUT_MINOR_VERSION_OFFSET] = TC_TLS_RECORD_MINOR;
  rec[TC_TLS_TRACE_PRESENT_OFFSET] = 1;
  rec[TC_TLS_TRACE_FLAGS_OFFSET] = 1;
  for (unsigned i = 0; i < TC_TLS_TRACE_ID_SIZE; ++i) rec[TC_TLS_TRACE_ID_OFFSET + i] = (uint8_t)(0x10 + n + i);
  for (unsigned i = 0; i < TC_TLS_SPAN_ID_SIZE; ++i) rec[TC_TLS_SPAN_ID_OFFSET + i] = (uint8_t)(0x40 + n + i);
  for (unsigned i = 0; i < TC_TLS_TRANSACTION_ID_SIZE; ++i) rec[TC_TLS_TRANSACTION_ID_OFFSET + i] = (uint8_t)(0x70 + n + i);
  rec[TC_TLS_VALID_OFFSET] = 1;
  if (set_record) set_record(rec);
  pthread_barrier_wait(&g_started);
  for (;;) sleep_ms(50);
  return NULL;
}

/* Reads and drops what arrives on the datagram socket, as an agent would, so
 * senders are not held up by a full queue. */
static void *drainer(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[65536];
  for (;;) {
    if (recv(fd, buf, sizeof buf, 0) < 0 && errno == EAGAIN) sleep_ms(5);
  }
  return NULL;
}

/* Burns CPU for ever: with the process in a cgroup whose CPU quota it
 * exhausts, every other thread woken (by a ptrace interrupt, say) is runnable
 * yet waits for a CPU: starved. */
static void *spinner(void *arg) {
  (void)arg;
  pthread_barrier_wait(&g_started);
  for (volatile unsigned long n = 0;; ++n) {
  }
  return NULL;
}

static void *vforker(void *arg) {
  (void)arg;
  pthread_barrier_wait(&g_started);
  pid_t child = vfork();
  if (child == 0) {
    /* Never execs: the parent thread stays parked in vfork. */
    for (;;) pause();
  }
  return NULL;
}

/* u16 minor, then three utf8_str (u32 length + bytes), packed. */
static void *make_storage(const char *service, const char *socket_path) {
  const char *fields[3] = {service, "test", socket_path};
  size_t size = 2;
  for (int i = 0; i < 3; ++i) size += 4 + strlen(fields[i]);
  uint8_t *s = calloc(1, size), *p = s;
  if (!s) die("calloc");
  uint16_t minor = TC_PROCESS_STORAGE_MINOR;
  memcpy(p, &minor, 2), p += 2;
  for (int i = 0; i < 3; ++i) {
    uint32_t len = (uint32_t)strlen(fields[i]);
    memcpy(p, &len, 4), p += 4;
    memcpy(p, fields[i], len), p += len;
  }
  return s;
}

static void deep_map(long levels) {
  int dir = open("/tmp", O_RDONLY | O_DIRECTORY);
  char name[64];
  snprintf(name, sizeof name, "tc-hostile-deep-%d", (int)getpid());
  if (mkdirat(dir, name, 0700) != 0 && errno != EEXIST) die("mkdir deep");
  int next = openat(dir, name, O_RDONLY | O_DIRECTORY);
  close(dir);
  dir = next;
  char level[201];
  memset(level, 'd', 200);
  level[200] = '\0';
  for (long i = 0; i < levels; ++i) {
    if (mkdirat(dir, level, 0700) != 0 && errno != EEXIST) die("mkdirat");
    next = openat(dir, level, O_RDONLY | O_DIRECTORY);
    if (next < 0) die("openat");
    close(dir);
    dir = next;
  }
  int fd = openat(dir, "deep.so", O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) die("deep file");
  if (mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) die("mmap deep file");
  close(fd);
  close(dir);
}

int main(int argc, char **argv) {
  const char *library = NULL, *socket_path = NULL, *publish = NULL, *fifo = NULL, *service = "hostile";
  int relative = 0, stream = 0, vfork_thread = 0, zombie_leader = 0, spin = 0;
  long threads = 2, deep = 0, exit_after = -1, exec_after = -1;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--library") && v) library = v, ++i;
    else if (!strcmp(a, "--socket") && v) socket_path = v, ++i;
    else if (!strcmp(a, "--publish") && v) publish = v, ++i;
    else if (!strcmp(a, "--fifo") && v) fifo = v, ++i;
    else if (!strcmp(a, "--service") && v) service = v, ++i;
    else if (!strcmp(a, "--threads") && v) threads = atol(v), ++i;
    else if (!strcmp(a, "--deep-map") && v) deep = atol(v), ++i;
    else if (!strcmp(a, "--exit-after") && v) exit_after = atol(v), ++i;
    else if (!strcmp(a, "--exec-after") && v) exec_after = atol(v), ++i;
    else if (!strcmp(a, "--bind-relative")) relative = 1;
    else if (!strcmp(a, "--stream")) stream = 1;
    else if (!strcmp(a, "--vfork")) vfork_thread = 1;
    else if (!strcmp(a, "--zombie-leader")) zombie_leader = 1;
    else if (!strcmp(a, "--spin")) spin = 1;
    else {
      fprintf(stderr, "hostile_target: unknown argument %s\n", a);
      return 2;
    }
  }
  if (deep > 0) deep_map(deep);
  if (fifo && mkfifo(fifo, 0600) != 0 && errno != EEXIST) die("mkfifo");
  if (socket_path) {
    int s = socket(AF_UNIX, (stream ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK, 0);
    if (s < 0) die("socket");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", socket_path);
    const char *bind_name = socket_path;
    if (relative) {
      char dir_copy[4096];
      snprintf(dir_copy, sizeof dir_copy, "%s", socket_path);
      if (chdir(dirname(dir_copy)) != 0) die("chdir");
      bind_name = basename(copy);
    }
    if (strlen(bind_name) >= sizeof addr.sun_path) {
      errno = ENAMETOOLONG;
      die("bind path");
    }
    strcpy(addr.sun_path, bind_name);
    unlink(bind_name);
    if (bind(s, (struct sockaddr *)&addr, sizeof addr) != 0) die("bind");
    if (stream && listen(s, 4) != 0) die("listen");
    if (!stream) {
      pthread_t t;
      if (pthread_create(&t, NULL, drainer, (void *)(intptr_t)s) != 0) die("pthread_create");
    }
  }
  if (!publish) publish = socket_path ? socket_path : "/nonexistent";
  if (library) {
    void *h = dlopen(library, RTLD_NOW);
    if (!h) {
      fprintf(stderr, "hostile_target: dlopen: %s\n", dlerror());
      return 2;
    }
    set_record = (void (*)(void *))dlsym(h, "tc_test_set_record");
    publish_storage = (void (*)(void *))dlsym(h, "tc_test_publish_storage");
    if (!set_record || !publish_storage) {
      fprintf(stderr, "hostile_target: %s lacks the tc_test_* accessors\n", library);
      return 2;
    }
  }
  pthread_barrier_init(&g_started, NULL, (unsigned)(threads + vfork_thread + spin + 1));
  for (long i = 0; i < threads; ++i) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void *)(uintptr_t)i) != 0) die("pthread_create");
  }
  if (vfork_thread) {
    pthread_t t;
    if (pthread_create(&t, NULL, vforker, NULL) != 0) die("pthread_create");
  }
  if (spin) {
    pthread_t t;
    if (pthread_create(&t, NULL, spinner, NULL) != 0) die("pthread_create");
  }
  pthread_barrier_wait(&g_started);
  if (publish_storage) publish_storage(make_storage(service, publish));
  if (vfork_thread) sleep_ms(50); /* let the vforker reach vfork() */
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  if (exit_after >= 0) {
    sleep_ms(exit_after);
    _exit(0);
  }
  if (exec_after >= 0) {
    sleep_ms(exec_after);
    execl("/bin/sleep", "sleep", "600", (char *)NULL);
    die("exec");
  }
  if (zombie_leader) pthread_exit(NULL);
  for (;;) sleep_ms(1000);
}
