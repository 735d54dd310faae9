from orders.cli import main

main()
