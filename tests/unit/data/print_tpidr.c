/* For the gdbstub test: an arm64 program that prints each thread's own
 * TPIDR_EL0 (read with mrs) and host tid, then waits to be read and killed. */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long tpidr_el0(void) {
    unsigned long v;
    __asm__ volatile("mrs %0, tpidr_el0" : "=r"(v));
    return v;
}

static void report(void) {
    printf("%ld %lx\n", (long)syscall(SYS_gettid), tpidr_el0());
    fflush(stdout);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reported = PTHREAD_COND_INITIALIZER;
static int done;

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    report();
    done = 1;
    pthread_cond_signal(&reported);
    pthread_mutex_unlock(&lock);
    for (;;) pause();
}

int main(void) {
    pthread_t t;
    report();
    pthread_create(&t, NULL, worker, NULL);
    pthread_mutex_lock(&lock);
    while (!done) pthread_cond_wait(&reported, &lock);
    pthread_mutex_unlock(&lock);
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
