/* An LD_PRELOAD shim for the room's real-fault test (room_io_error.rs): while the file named
 * by SECKILL_TEST_FSYNC_EIO_WHILE exists, fsync and fdatasync of SQLite's write-ahead log
 * (a path ending in "-wal") fail with EIO, as a failing disk makes them. Everything else
 * goes to libc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failing(int fd) {
    const char *flag = getenv("SECKILL_TEST_FSYNC_EIO_WHILE");
    if (flag == NULL || access(flag, F_OK) != 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = 0;
    size_t len = strlen(path);
    return len > 4 && strcmp(path + len - 4, "-wal") == 0;
}

int fsync(int fd) {
    if (failing(fd)) { errno = EIO; return -1; }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    if (failing(fd)) { errno = EIO; return -1; }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
