/* A writer for mapping_watch_test: publishes four 8-byte fields at the head of
 * a memfd mapping named TC_WATCHED from a second thread, the last field last
 * ("last") or first ("first"), names the mapping by prctl, then forks a child
 * that exits at once, and with "spawn" also runs /bin/true by posix_spawn (a
 * child in the parent's own address space until its exec, as glibc's system()
 * starts one). argv: order, dontfork (0|1) [, spawn]. */
#define _GNU_SOURCE
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

static uint64_t *head;
static int last_field_first;

static void *publish(void *unused)
{
    (void)unused;
    if (last_field_first)
        atomic_store((_Atomic uint64_t *)&head[3], 4);
    for (int i = 0; i < 3; ++i) {
        head[i] = (uint64_t)(i + 1);
        atomic_thread_fence(memory_order_seq_cst);
    }
    if (!last_field_first)
        atomic_store((_Atomic uint64_t *)&head[3], 4);
    prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)head, 4096UL, (unsigned long)"TC_WATCHED");
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "spawn") == 0))
        return 2;
    last_field_first = strcmp(argv[1], "first") == 0;
    int fd = memfd_create("TC_WATCHED", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        return 3;
    head = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (head == MAP_FAILED)
        return 4;
    if (argv[2][0] == '1')
        madvise(head, 4096, MADV_DONTFORK);
    pthread_t t;
    if (pthread_create(&t, NULL, publish, NULL) != 0)
        return 5;
    pthread_join(t, NULL);
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    if (argc == 4) {
        char *true_argv[] = {"/bin/true", NULL};
        extern char **environ;
        if (posix_spawn(&child, "/bin/true", NULL, NULL, true_argv, environ) != 0)
            return 6;
        waitpid(child, &status, 0);
    }
    printf("done\n");
    return 0;
}
