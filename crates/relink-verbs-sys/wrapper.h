/* The rdma-core headers relink binds (see build.rs for the allow-list). */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
