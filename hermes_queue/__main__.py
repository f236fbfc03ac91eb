from hermes_queue.cli import main

main()
