/* LD_PRELOAD shim for tests: while the file named by SECKILL_TEST_FSYNC_FAIL exists, every
 * fsync and fdatasync of the process fails with EIO (after doing nothing), as a failing disk
 * or a lost network block device reports it. Without the variable it only forwards. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *path = getenv("SECKILL_TEST_FSYNC_FAIL");
    return path && access(path, F_OK) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
