#!/bin/sh
# Rebuilds the ELF fixtures of glibc_test.go with gcc on an x86-64 glibc
# system (these were made on Debian 12, glibc 2.36, gcc 12):
#   hello     a program: needs GLIBC_2.34 (__libc_start_main) and GLIBC_2.2.5
#   libcopy.so a library: needs GLIBC_2.14 (memcpy) and GLIBC_2.2.5, so the
#             newest is 2.14, which a comparison of strings gets wrong
#   static    a static program: no loader, no symbol versions
set -e
cd "$(dirname "$0")"
cat > /tmp/gorun-elf-hello.c <<'C'
#include <stdio.h>
int main(void) { puts("hello"); return 0; }
C
cat > /tmp/gorun-elf-copy.c <<'C'
#include <string.h>
void copy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
C
cat > /tmp/gorun-elf-static.c <<'C'
void _start(void) { __asm__ volatile("mov $60, %eax\n xor %edi, %edi\n syscall"); }
C
gcc -Os -s -o hello /tmp/gorun-elf-hello.c
gcc -Os -fno-builtin -s -shared -fPIC -o libcopy.so /tmp/gorun-elf-copy.c
gcc -Os -s -static -nostdlib -Wl,--build-id=none -o static /tmp/gorun-elf-static.c
rm -f /tmp/gorun-elf-hello.c /tmp/gorun-elf-copy.c /tmp/gorun-elf-static.c
