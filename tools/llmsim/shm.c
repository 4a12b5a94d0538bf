/*
 * shm.c: creates and maps llmsim's shared state file (--state-shm).
 *
 * Owns: the mapping (and closes its fd once mapped). The file is left in
 * place at exit, so a reader can still see the final state; whoever chose
 * the path removes it. Layout: llmsim_shm.h.
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lg_core.h"
#include "prefix.h"

static size_t
shm_align(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

int
lg_sim_shm_open(struct lg_sim_shm *s, const char *path, const char *name, uint32_t slots,
                uint32_t cache_blocks, uint32_t block_tokens)
{
    uint32_t table_slots = lg_sim_prefix_table_slots(cache_blocks);
    size_t slot_off = shm_align(sizeof(struct llmsim_shm));
    size_t wait_off = shm_align(slot_off + (size_t)slots * sizeof(struct llmsim_shm_slot));
    size_t block_off = shm_align(wait_off + LG_SIM_SHM_WAIT_CAP * sizeof(struct llmsim_shm_waiter));
    size_t table_off =
        shm_align(block_off + (size_t)cache_blocks * sizeof(struct llmsim_shm_block));
    size_t size = shm_align(table_off + (size_t)table_slots * sizeof(uint32_t));
    struct llmsim_shm *m;
    void *p;
    int fd;

    memset(s, 0, sizeof(*s));
    if (size > UINT32_MAX) {
        LG_ERROR("--state-shm %s: state of %zu bytes is too large", path, size);
        return LG_ERR;
    }
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        LG_ERROR("--state-shm %s: %s", path, strerror(errno));
        return LG_ERR;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        LG_ERROR("--state-shm %s: cannot size to %zu bytes: %s", path, size, strerror(errno));
        close(fd);
        return LG_ERR;
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        LG_ERROR("--state-shm %s: mmap: %s", path, strerror(errno));
        return LG_ERR;
    }
    m = p;
    m->version = LLMSIM_SHM_VERSION;
    m->slots = slots;
    m->size = size;
    m->pid = (uint32_t)getpid();
    m->prefix_block_tokens = block_tokens;
    m->prefix_cache_blocks = cache_blocks;
    m->prefix_table_mask = table_slots - 1;
    m->wait_cap = LG_SIM_SHM_WAIT_CAP;
    m->slot_off = (uint32_t)slot_off;
    m->wait_off = (uint32_t)wait_off;
    m->block_off = cache_blocks ? (uint32_t)block_off : 0;
    m->table_off = cache_blocks ? (uint32_t)table_off : 0;
    snprintf(m->name, sizeof(m->name), "%s", name);
    s->map = m;
    s->size = size;
    s->slot = (struct llmsim_shm_slot *)((char *)p + slot_off);
    s->ring = (struct llmsim_shm_waiter *)((char *)p + wait_off);
    s->blocks = cache_blocks ? (struct llmsim_shm_block *)((char *)p + block_off) : NULL;
    s->table = cache_blocks ? (uint32_t *)((char *)p + table_off) : NULL;
    return LG_OK;
}

void
lg_sim_shm_publish_ready(struct lg_sim_shm *s)
{
    if (s->map != NULL) {
        __atomic_store_n(&s->map->magic, LLMSIM_SHM_MAGIC, __ATOMIC_RELEASE);
    }
}

void
lg_sim_shm_close(struct lg_sim_shm *s)
{
    if (s->map != NULL) {
        munmap(s->map, s->size);
    }
    memset(s, 0, sizeof(*s));
}
