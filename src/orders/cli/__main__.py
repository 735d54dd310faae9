"""`python -m orders.cli`: the same command line as `orders`."""

from orders.cli import main

main()
