/*
 * A qemu-user TCG plugin that counts the guest instructions a program
 * executes: each translation block adds its instruction count to its own
 * counter every time it runs. At exit it prints the total to stderr and,
 * when QEMU_INSN_PROFILE names a file, writes "address count" lines (one per
 * block) there, for scripts/aarch64-insns.sh to attribute to functions.
 *
 * Written against the plugin API of qemu 7.2 (Debian 12's qemu-user),
 * version 1: only the handful of calls below are declared, so no qemu
 * headers are needed to build it:
 *   cc -shared -fPIC -O2 -o insn-count.so insn-count.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef void (*tb_trans_cb)(qemu_plugin_id_t, struct qemu_plugin_tb *);
typedef void (*udata_cb)(qemu_plugin_id_t, void *);
enum { INLINE_ADD_U64 = 0 };

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *, int op, void *ptr,
                                              uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, udata_cb, void *);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* One counter per translated block, kept in a list for the exit report. */
struct block {
    uint64_t vaddr;
    uint64_t executed;
    struct block *next;
};
static struct block *blocks;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    struct block *b = calloc(1, sizeof *b);
    if (!b)
        return;
    b->vaddr = qemu_plugin_tb_vaddr(tb);
    b->next = blocks;
    blocks = b;
    /* Counted inline, without a callback: a block adds its length. */
    qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, &b->executed,
                                             qemu_plugin_tb_n_insns(tb));
    (void)id;
}

static void at_exit_report(qemu_plugin_id_t id, void *unused) {
    uint64_t total = 0;
    const char *path = getenv("QEMU_INSN_PROFILE");
    FILE *f = path ? fopen(path, "w") : NULL;
    for (struct block *b = blocks; b; b = b->next) {
        total += b->executed;
        if (f && b->executed)
            fprintf(f, "%llx %llu\n", (unsigned long long)b->vaddr,
                    (unsigned long long)b->executed);
    }
    if (f)
        fclose(f);
    fprintf(stderr, "guest instructions: %llu\n", (unsigned long long)total);
    (void)id;
    (void)unused;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const void *info, int argc,
                                                               char **argv) {
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit_report, NULL);
    (void)info;
    (void)argc;
    (void)argv;
    return 0;
}
