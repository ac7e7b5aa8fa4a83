/*
 * The nested tree: one transport sub-communicator per level for this rank,
 * created level by level (ascending) by every rank of the world.
 */
#include "nested_groups/tree.h"

#include "common/log.h"
#include "nested_groups/group.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct nsp_tree {
    nsp_comm_t    *world;                        /* borrowed */
    int            nlevels;
    int            degree[NSP_TREE_MAX_LEVELS];
    int            rank0[NSP_TREE_MAX_LEVELS];   /* first world rank of this rank's group */
    nsp_group_t    group[NSP_TREE_MAX_LEVELS];   /* this rank's group per level; its tp
                                                    (the level's communicator) owned */
    nsp_group_t  **extra;                        /* [nextra] owned: groups over the world
                                                    (nsp_tree_group_get), made on first use */
    int            nextra;
};

nsp_status_t nsp_tree_default_degrees(const nsp_comm_t *world, int *degrees, int capacity,
                                      int *nlevels)
{
    if (world == NULL || degrees == NULL || nlevels == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_default_degrees: NULL argument");
    }
    /* No NVLink domain or head limit here: the node block and the world. */
    return nsp_topo_levels_for_places(world->places, world->size, 0, 0, degrees, capacity,
                                      nlevels);
}

/* Every rank must pass the same degrees: compare them over the world. */
static nsp_status_t tree_agree(nsp_comm_t *world, const int *degrees, int nlevels)
{
    int32_t      mine[NSP_TREE_MAX_LEVELS + 1] = {0};
    int32_t     *all;
    nsp_status_t status = NSP_OK;
    size_t       bytes  = sizeof(mine);

    mine[0] = nlevels;
    for (int l = 0; l < nlevels; ++l) {
        mine[l + 1] = degrees[l];
    }
    all = malloc(bytes * (size_t)world->size);
    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "tree: no memory to compare degrees");
    }
    NSP_CHECK_GOTO(world->ops->allgather(world->world, mine, all, bytes), status, out_free);
    for (int r = 0; r < world->size; ++r) {
        if (memcmp(all + (size_t)r * (NSP_TREE_MAX_LEVELS + 1), mine, bytes) != 0) {
            status = nsp_error(NSP_ERR_MISMATCH,
                               "tree: rank %d passed other degrees than rank %d (%d levels vs "
                               "%d): every rank must pass the same degrees to nsp_tree_create",
                               r, world->rank, all[(size_t)r * (NSP_TREE_MAX_LEVELS + 1)],
                               nlevels);
            break;
        }
    }
out_free:
    free(all);
    return status;
}

static void tree_log(const nsp_tree_t *tree)
{
    char   text[512];
    size_t used = 0;

    if (!nsp_log_enabled(NSP_LOG_INFO)) {
        return;
    }
    text[0] = '\0';
    for (int l = 0; l < tree->nlevels && used + 32 < sizeof(text); ++l) {
        int n = snprintf(text + used, sizeof(text) - used, " L%d:d=%d[%d,%d)", l,
                         tree->degree[l], tree->rank0[l], tree->rank0[l] + tree->degree[l]);
        used += n > 0 ? (size_t)n : 0;
    }
    NSP_INFO("tree: rank %d of %d, %d levels:%s%s", tree->world->rank, tree->world->size,
             tree->nlevels, text,
             tree->degree[tree->nlevels - 1] < tree->world->size ? " (forest)" : "");
}

/* The group of level l, carried by the level's communicator (already split). */
static void tree_level_group(nsp_tree_t *tree, int l)
{
    nsp_group_t *g = &tree->group[l];

    g->rank0  = tree->rank0[l];
    g->degree = tree->degree[l];
    g->index  = tree->world->rank - tree->rank0[l];
    g->base   = 0;
    g->level  = l;
}

nsp_status_t nsp_tree_create(nsp_comm_t *world, const int *degrees, int nlevels,
                             nsp_tree_t **out)
{
    int          defaults[NSP_TREE_MAX_LEVELS];
    nsp_tree_t  *tree;
    nsp_status_t status;

    if (world == NULL || out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_create: world and tree must be set");
    }
    if (degrees == NULL) {
        NSP_CHECK(nsp_tree_default_degrees(world, defaults, NSP_TREE_MAX_LEVELS, &nlevels));
        degrees = defaults;
    }
    NSP_CHECK(nsp_tree_check_degrees(degrees, nlevels, world->size));
    NSP_CHECK(tree_agree(world, degrees, nlevels));
    tree = calloc(1, sizeof(*tree));
    if (tree == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "tree: no memory");
    }
    tree->world   = world;
    tree->nlevels = nlevels;
    /* Ascending, on every rank: the agreed order of docs/design.md §4. */
    for (int l = 0; l < nlevels; ++l) {
        tree->degree[l] = degrees[l];
        tree->rank0[l]  = nsp_tree_group_rank0(world->rank, degrees[l]);
        NSP_CHECK_GOTO(world->ops->split(world->world, tree->rank0[l], degrees[l],
                                         &tree->group[l].tp),
                       status, err_destroy_levels);
        tree_level_group(tree, l);
    }
    ++world->ntrees;
    tree_log(tree);
    *out = tree;
    return NSP_OK;
err_destroy_levels:
    for (int l = nlevels - 1; l >= 0; --l) {
        if (tree->group[l].tp != NULL) {
            world->ops->destroy(tree->group[l].tp);
        }
    }
    free(tree);
    return status;
}

nsp_status_t nsp_tree_destroy(nsp_tree_t *tree)
{
    if (tree == NULL) {
        return NSP_OK;
    }
    for (int g = 0; g < tree->nextra; ++g) {
        free(tree->extra[g]);
    }
    free(tree->extra);
    for (int l = tree->nlevels - 1; l >= 0; --l) {
        tree->world->ops->destroy(tree->group[l].tp);
    }
    --tree->world->ntrees;
    free(tree);
    return NSP_OK;
}

static nsp_status_t tree_check_level(const nsp_tree_t *tree, int level, const char *fn)
{
    if (tree == NULL || level < 0 || level >= tree->nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: level %d of a tree with %d levels", fn, level,
                         tree != NULL ? tree->nlevels : 0);
    }
    return NSP_OK;
}

nsp_status_t nsp_tree_nlevels(const nsp_tree_t *tree, int *nlevels)
{
    if (tree == NULL || nlevels == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_nlevels: NULL argument");
    }
    *nlevels = tree->nlevels;
    return NSP_OK;
}

nsp_status_t nsp_tree_degree(const nsp_tree_t *tree, int level, int *degree)
{
    NSP_CHECK(tree_check_level(tree, level, "nsp_tree_degree"));
    if (degree == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_degree: degree is NULL");
    }
    *degree = tree->degree[level];
    return NSP_OK;
}

nsp_status_t nsp_tree_level_of_degree(const nsp_tree_t *tree, int degree, int *level)
{
    char   list[256] = "";
    size_t used      = 0;

    if (tree == NULL || level == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_level_of_degree: NULL argument");
    }
    for (int l = 0; l < tree->nlevels; ++l) {
        if (tree->degree[l] == degree) {
            *level = l;
            return NSP_OK;
        }
        int n = snprintf(list + used, sizeof(list) - used, "%s%d", l > 0 ? ", " : "",
                         tree->degree[l]);
        used += n > 0 && (size_t)n < sizeof(list) - used ? (size_t)n : 0;
    }
    return nsp_error(NSP_ERR_NOT_FOUND, "tree has no level of degree %d (degrees: %s)", degree,
                     list);
}

nsp_status_t nsp_tree_group(const nsp_tree_t *tree, int level, int *rank0, int *index)
{
    NSP_CHECK(tree_check_level(tree, level, "nsp_tree_group"));
    if (rank0 != NULL) {
        *rank0 = tree->rank0[level];
    }
    if (index != NULL) {
        *index = tree->world->rank - tree->rank0[level];
    }
    return NSP_OK;
}

nsp_status_t nsp_tree_group_ranks(const nsp_tree_t *tree, int level, int *ranks)
{
    NSP_CHECK(tree_check_level(tree, level, "nsp_tree_group_ranks"));
    if (ranks == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_group_ranks: ranks is NULL");
    }
    for (int i = 0; i < tree->degree[level]; ++i) {
        ranks[i] = tree->rank0[level] + i;
    }
    return NSP_OK;
}

nsp_status_t nsp_tree_world(const nsp_tree_t *tree, nsp_comm_t **world)
{
    if (tree == NULL || world == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_world: NULL argument");
    }
    *world = tree->world;
    return NSP_OK;
}

nsp_status_t nsp_tree_level_tp(const nsp_tree_t *tree, int level, nsp_tp_comm_t **comm)
{
    NSP_CHECK(tree_check_level(tree, level, "nsp_tree_level_tp"));
    if (comm == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_level_tp: comm is NULL");
    }
    *comm = tree->group[level].tp;
    return NSP_OK;
}

nsp_status_t nsp_tree_group_tp(const nsp_tree_t *tree, int degree, int rank0,
                               nsp_tp_comm_t **comm)
{
    int level;

    if (tree == NULL || comm == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_group_tp: NULL argument");
    }
    level = nsp_group_level(tree->degree, tree->nlevels, tree->world->rank, rank0, degree);
    *comm = level >= 0 ? tree->group[level].tp : NULL;
    return NSP_OK;
}

nsp_status_t nsp_tree_level_group(nsp_tree_t *tree, int level, nsp_group_t **group)
{
    NSP_CHECK(tree_check_level(tree, level, "nsp_tree_level_group"));
    if (group == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_level_group: group is NULL");
    }
    *group = &tree->group[level];
    return NSP_OK;
}

/* A group over the world already handed out, or NULL. */
static nsp_group_t *tree_find_extra(const nsp_tree_t *tree, int rank0, int degree)
{
    for (int g = 0; g < tree->nextra; ++g) {
        if (tree->extra[g]->rank0 == rank0 && tree->extra[g]->degree == degree) {
            return tree->extra[g];
        }
    }
    return NULL;
}

/* A new group over the world, kept by the tree. */
static nsp_status_t tree_add_extra(nsp_tree_t *tree, const nsp_group_map_t *map, int rank0,
                                   int degree, nsp_group_t **out)
{
    nsp_group_t **grown = realloc(tree->extra, sizeof(*grown) * (size_t)(tree->nextra + 1));
    nsp_group_t  *g;

    if (grown == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "tree: no memory for the group of degree %d at "
                         "rank %d", degree, rank0);
    }
    tree->extra = grown;
    g           = calloc(1, sizeof(*g));
    if (g == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "tree: no memory for the group of degree %d at "
                         "rank %d", degree, rank0);
    }
    g->tp     = nsp_comm_tp(tree->world);
    g->rank0  = rank0;
    g->degree = degree;
    g->index  = map->index;
    g->base   = map->base;
    g->level  = -1;
    tree->extra[tree->nextra++] = g;
    NSP_DEBUG("tree: rank %d: the group of degree %d at rank %d is not a tree group; it runs "
              "over the world", tree->world->rank, degree, rank0);
    *out = g;
    return NSP_OK;
}

nsp_status_t nsp_tree_group_get(nsp_tree_t *tree, int rank0, int degree, nsp_group_t **group)
{
    nsp_group_map_t map;
    nsp_group_t    *found;

    if (tree == NULL || group == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_tree_group_get: NULL argument");
    }
    NSP_CHECK(nsp_group_map(tree->degree, tree->nlevels, tree->world->size, tree->world->rank,
                            rank0, degree, &map));
    if (map.level >= 0) {
        *group = &tree->group[map.level];
        return NSP_OK;
    }
    found = tree_find_extra(tree, rank0, degree);
    if (found == NULL) {
        return tree_add_extra(tree, &map, rank0, degree, group);
    }
    *group = found;
    return NSP_OK;
}
