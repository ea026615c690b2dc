/* fxc_init and fxc_run from a thread the application created (1 MiB stack), with the built-in pool.
 * usage: app_thread THREADS IN... OUT... ; prints the thread count the model ran on. */
#include <pthread.h>

#include "app_common.h"

static int result = -1;

static void *run_model(void *arg)
{
    int threads = *(int *)arg;
    if (fxc_set_threads(threads) != FXC_OK || fxc_init(arena, sizeof arena) != FXC_OK)
        return NULL;
    for (int r = 0; r < 3; r++)  /* the pool persists across runs */
        if ((result = fxc_run(arena, inputs, outputs)) != FXC_OK)
            return NULL;
    printf("threads %d\n", fxc_get_threads());
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2 + FXC_NUM_INPUTS + FXC_NUM_OUTPUTS)
        return 2;
    int threads = atoi(argv[1]);
    if (load_inputs(argv + 2) != 0)
        return 1;
    if (fxc_set_threads(FXC_THREADS + 1) != FXC_ERR_THREADS || fxc_set_threads(0) != FXC_ERR_THREADS) {
        fprintf(stderr, "fxc_set_threads accepted a count outside 1..FXC_THREADS\n");
        return 1;
    }
    pthread_attr_t attr;
    pthread_t tid;
    if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, 1 << 20) ||
        pthread_create(&tid, &attr, run_model, &threads) || pthread_join(tid, NULL))
        return 1;
    if (result != FXC_OK) {
        fprintf(stderr, "fxc_run: %s\n", fxc_strerror(result));
        return 1;
    }
    fxc_set_threads(1); /* stops the workers */
    return save_outputs(argv + 2 + FXC_NUM_INPUTS) != 0;
}
